"""Tests for pool._dispatch._sends: a balancer stepped without a loop, and what a plain call's first answer does."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from pool._dispatch._sends import Sends, Suspended, _by_generator, pick
from pool._errors import WorkerRejected
from pool._transport._outgoing import QUEUED, SENT
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import RESOURCE_EXHAUSTED

UIDS = [uuid.UUID(int=i) for i in range(1, 4)]


class _Context:
    """A balancer's read-only view of three workers (weakly referenceable, as a round robin's cursor needs)."""

    def __init__(self, full: frozenset[uuid.UUID]) -> None:
        self.workers = {uid: (None, object()) for uid in UIDS}
        self.ascending_uids = tuple(UIDS)
        self.known_full = full


def _context(full: set[uuid.UUID] | None = None) -> Any:
    return _Context(frozenset(full or ()))


class TestPick:
    def test_pick_should_follow_the_balancers_order_and_skip_full_workers(self):
        """Test that the built-in balancers, stepped by hand, give the worker they would offer first."""
        task = SimpleNamespace(name="f")
        assert pick(PriorityLoadBalancer(), task, _context(), lambda uid: uid) == UIDS[0]  # type: ignore[arg-type]
        assert pick(PriorityLoadBalancer(), task, _context({UIDS[0]}), lambda uid: uid) == UIDS[1]  # type: ignore[arg-type]
        assert pick(PriorityLoadBalancer(), task, _context(set(UIDS)), lambda uid: uid) is None  # type: ignore[arg-type]
        round_robin, context = RoundRobinLoadBalancer(), _context()
        assert [pick(round_robin, task, context, lambda uid: uid) for _ in range(4)] == [*UIDS, UIDS[0]]  # type: ignore[arg-type]

    def test_pick_should_pass_over_a_worker_that_left(self):
        task = SimpleNamespace(name="f")
        members = {UIDS[1]}
        assert pick(PriorityLoadBalancer(), task, _context(), lambda uid: uid if uid in members else None) == UIDS[1]  # type: ignore[arg-type]

    def test_a_balancer_that_awaits_should_raise_suspended(self):
        """Test that a balancer awaiting something real cannot be stepped by hand (its pool awaits it instead)."""

        class Waits:
            async def delegate(self, task: Any, *, context: Any) -> Any:
                await asyncio.sleep(0)
                yield UIDS[0]

        with pytest.raises(Suspended):
            pick(Waits(), SimpleNamespace(name="f"), _context(), lambda uid: uid)  # type: ignore[arg-type]


class _Placement:
    def __init__(self) -> None:
        self.refusals: list[tuple[uuid.UUID, BaseException]] = []
        self.queued_on: list[uuid.UUID] = []

    def send_plain(self, task: Any) -> Any:
        raise AssertionError("not used here")

    def refused(self, uid: uuid.UUID, exc: BaseException, epoch: int) -> None:
        self.refusals.append((uid, exc))

    def queued(self, uid: uuid.UUID) -> None:
        self.queued_on.append(uid)


def _frame(body: str) -> pb.Frame:
    frame = pb.Frame(id=1)
    if body == "reject":
        frame.reject.code = RESOURCE_EXHAUSTED
    elif body == "accept":
        frame.accept.queued = True
    else:
        frame.outcome.SetInParent()
    return frame


class TestAnswers:
    async def test_an_accept_should_serve_the_waiter_and_a_reject_put_it_back_in_its_place(self):
        placement, backs = _Placement(), []
        sends = Sends(placement, backs.append, lambda: None)
        loop = asyncio.get_running_loop()
        waiter = SimpleNamespace(served=loop.create_future())
        call = SimpleNamespace(session=SimpleNamespace(label="w"), name="f", sent=True, finished=False, state=SENT)
        assert not sends._answered(waiter, UIDS[0], 0, call, _frame("reject"))  # type: ignore[arg-type]
        assert backs == [waiter] and not waiter.served.done()
        assert isinstance(placement.refusals[0][1], WorkerRejected)
        assert placement.queued_on == []
        call.state = QUEUED  # (as `OutgoingCall.reply` sets it from the Accept, before this sees it)
        assert not sends._answered(waiter, UIDS[1], 0, call, _frame("accept"))  # type: ignore[arg-type]
        assert waiter.served.result() is call
        assert placement.queued_on == [UIDS[1]]  # a worker that went idle meanwhile may ask for it back

    async def test_an_outcome_that_overtook_its_accept_should_reach_the_caller(self):
        sends = Sends(_Placement(), lambda waiter: None, lambda: None)
        waiter = SimpleNamespace(served=asyncio.get_running_loop().create_future())
        call = SimpleNamespace(sent=True, finished=False, state=SENT)
        assert sends._answered(waiter, UIDS[0], 0, call, _frame("outcome"))  # type: ignore[arg-type]
        assert waiter.served.result() is call


class TestFirst:
    @pytest.mark.parametrize("make", [PriorityLoadBalancer, RoundRobinLoadBalancer])
    def test_first_should_name_the_worker_delegate_offers_first(self, make):
        """Test that the built-ins' shortcut agrees with their generator, full workers skipped, the cursor moved on."""
        task = SimpleNamespace(name="f")
        for full in ([], [UIDS[0]], [UIDS[1], UIDS[2]], UIDS):
            by_generator, by_first = make(), make()
            context_a, context_b = _context(set(full)), _context(set(full))
            for _ in range(4):
                expected = _by_generator(by_generator, task, context_a, lambda uid: uid)  # type: ignore[arg-type]
                assert by_first.first(task, context=context_b) == expected
