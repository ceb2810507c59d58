"""Tests for pool._dispatch._placement: one task offered to the workers in the balancer's order until one accepts.

A real `Membership` and `Roster` and the built-in balancers; each worker's connection is a small fake whose
`dispatch` accepts or raises what the test says (the pool's real connections are in the integration tests).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pool
from balancer import PriorityLoadBalancer
from pool._base._exit import DRAINING_MESSAGE
from pool._call._task import Task
from pool._dispatch._membership import Membership
from pool._dispatch._placement import OVERDUE_GRACE_S, Placement
from pool._transport._outgoing import QUEUED, SENT, STARTED
from pool._transport._trust import Trust

WAIT_S = 5.0
UIDS = [uuid.UUID(int=i) for i in range(1, 7)]


class Call:
    """What a worker's Accept gives the pool: a call that ends when the test says."""

    def __init__(self, uid: uuid.UUID, state: int = STARTED) -> None:
        self.uid = uid
        self.state = state
        self.recalled = False
        self.cancelled = False
        self.cancelled_here = False
        self.handed_back = False
        self._finish: list[Callable[[Call], object]] = []

    def on_finish(self, callback: Callable[[Call], object]) -> None:
        self._finish.append(callback)

    def cancel(self) -> None:
        self.cancelled = True

    def hand_back(self) -> None:
        self.handed_back = self.recalled = True  # (as OutgoingCall: asked back once)

    def end(self) -> None:
        for callback in self._finish:
            callback(self)


class Connection:
    """A worker's connection: ``answer`` says what its next dispatch does (accept, or raise it)."""

    def __init__(self, uid: uuid.UUID, offers: list[uuid.UUID], answer: BaseException | None = None) -> None:
        self.metadata = pool.WorkerMetadata(uid=uid, address="127.0.0.1:1")
        self.answer = answer
        self.state = STARTED  # of the calls it accepts
        self.offers = offers
        self.broken = False
        self.closed = False
        self.calls: list[Call] = []

    async def dispatch(self, task: Task) -> Call:
        self.offers.append(self.metadata.uid)
        if self.answer is not None:
            raise self.answer
        call = Call(self.metadata.uid, self.state)
        self.calls.append(call)
        return call

    def send(self, task: Task) -> Call:
        self.offers.append(self.metadata.uid)
        call = Call(self.metadata.uid, self.state)
        self.calls.append(call)
        return call

    async def close(self) -> None:
        self.closed = True


class Pool:
    """A placement over fake workers, with what it closes recorded."""

    def __init__(self, uids=UIDS[:3], *, balancer: Any = None, plain_prefetch: int = 0) -> None:
        self.offers: list[uuid.UUID] = []
        self.closed: list[Any] = []
        self.membership = Membership(
            None,  # type: ignore[arg-type]
            credentials=None,
            trust=Trust.of("a key"),
            tags=(),
            changed=lambda: None,
            close=self.closed.extend,
            is_local=lambda uid: False,
            broken_local=lambda uid: None,
        )
        self.roster = self.membership.roster
        self.workers = {uid: Connection(uid, self.offers) for uid in uids}
        for connection in self.workers.values():
            self.roster.add(connection)  # type: ignore[arg-type]
        self.placement = Placement(
            balancer or PriorityLoadBalancer(), self.roster, self.membership, self.closed.extend, plain_prefetch
        )

    async def place(self, task: Task) -> Call:
        return await asyncio.wait_for(self.placement.place(task), WAIT_S)  # type: ignore[return-value]


def task(name: str = "f", *, plain: bool = False) -> Task:
    return Task(name, False, b"digest", b"", b"", plain=plain)


ANSWERS = {
    "accept": lambda: None,
    "busy": lambda: pool.WorkerRejected("worker w: rejected by backpressure"),
    "full": lambda: pool.WorkerRejected("worker w: rejected by backpressure", full=True),
    "broken": lambda: pool.WorkerBroken("worker w: INTERNAL", "INTERNAL"),
}


class TestPlacement:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(sorted(ANSWERS)), min_size=1, max_size=6))
    def test_place_should_offer_in_ascending_uid_order_and_stop_at_the_first_accept(self, answers):
        """Test the leaky bucket: lowest uid first, each refusal reported back, the first accept ends the offers.

        Busy workers are kept, full ones marked known full, broken ones evicted and closed; none accepting
        is `NoWorkersAvailable` caused by the last refusal.
        """
        asyncio.run(self._offer_in_order(answers))

    @staticmethod
    async def _offer_in_order(answers: list[str]) -> None:
        placement = Pool(UIDS[: len(answers)])
        for uid, answer in zip(UIDS, answers, strict=False):
            placement.workers[uid].answer = ANSWERS[answer]()
        first = answers.index("accept") if "accept" in answers else None
        if first is None:
            with pytest.raises(pool.NoWorkersAvailable) as info:
                await placement.place(task())
            assert info.value.__cause__ is placement.workers[UIDS[len(answers) - 1]].answer  # the last refusal
            assert placement.offers == UIDS[: len(answers)]
        else:
            call = await placement.place(task())
            assert call.uid == UIDS[first]
            assert placement.offers == UIDS[: first + 1]
            assert placement.placement.dispatched == 1
        tried = answers[: len(placement.offers)]
        broken = [UIDS[i] for i, answer in enumerate(tried) if answer == "broken"]
        full = {UIDS[i] for i, answer in enumerate(tried) if answer == "full"}
        assert [c.metadata.uid for c in placement.closed] == broken  # evicted, handed over to be closed
        assert not set(broken) & set(placement.roster.workers)
        assert set(placement.roster.known_full) == full

    async def test_place_should_skip_a_worker_known_full_until_it_announces_room(self):
        """Test that a worker that said it is full is not asked again (no round trip) until it has room."""
        placement = Pool(UIDS[:2])
        placement.workers[UIDS[0]].answer = ANSWERS["full"]()
        assert (await placement.place(task())).uid == UIDS[1]
        placement.workers[UIDS[0]].answer = None
        placement.offers.clear()
        assert (await placement.place(task())).uid == UIDS[1]
        assert placement.offers == [UIDS[1]]  # the full one was passed over
        placement.roster.room.announced(UIDS[0])
        assert (await placement.place(task())).uid == UIDS[0]

    async def test_place_should_say_no_worker_has_room_when_every_worker_is_known_full(self):
        """Test the message when no worker was even asked: all turned this pool away and owe it a Room."""
        placement = Pool(UIDS[:2])
        for connection in placement.workers.values():
            connection.answer = ANSWERS["full"]()
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted"):
            await placement.place(task())
        placement.offers.clear()
        with pytest.raises(
            pool.NoWorkersAvailable, match=r"no worker has room for f\(\): 2 of 2 turned this pool away"
        ):
            await placement.place(task())
        assert placement.offers == []
        placement.placement.doubt()  # the queue's backstop: offer them again
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted"):
            await placement.place(task())
        assert placement.offers == UIDS[:2]

    async def test_place_should_raise_pool_is_empty_when_there_are_no_workers(self):
        """Test the message of an empty pool."""
        with pytest.raises(pool.NoWorkersAvailable, match="the pool is empty"):
            await Pool([]).place(task())

    async def test_place_should_note_a_draining_worker(self):
        """Test that a worker that turned a call away as draining is noted for the pool to prune."""
        placement = Pool(UIDS[:2])
        placement.workers[UIDS[0]].answer = pool.WorkerRejected(f"worker w: {DRAINING_MESSAGE}", "UNAVAILABLE")
        assert (await placement.place(task())).uid == UIDS[1]
        assert placement.placement.draining == {UIDS[0]}
        assert UIDS[0] in placement.roster  # still a member: it finishes its calls

    async def test_place_should_skip_a_uid_that_left_the_pool_since_the_balancer_looked(self):
        """Test that a balancer offering a worker no longer in the roster gets told "next" (None)."""
        sent: list[object] = []

        class Stale:
            async def delegate(self, task, *, context):
                sent.append((yield uuid.UUID(int=999)))
                sent.append((yield UIDS[0]))

        placement = Pool(UIDS[:1], balancer=Stale())
        assert (await placement.place(task())).uid == UIDS[0]
        assert sent == [None, UIDS[0]]

    async def test_place_should_cancel_the_call_and_raise_when_the_balancer_offers_another_worker_after_a_success(self):
        """Test that a balancer breaking the contract fails loudly rather than running the task twice."""

        class Greedy:
            async def delegate(self, task, *, context):
                yield UIDS[0]
                yield UIDS[1]

        placement = Pool(UIDS[:2], balancer=Greedy())
        with pytest.raises(RuntimeError, match="offered another worker after a success"):
            await placement.place(task())
        (call,) = placement.workers[UIDS[0]].calls
        assert call.cancelled

    async def test_place_should_propagate_anything_else_and_change_no_membership(self):
        """Test that a bug (not a rejection) in a worker's dispatch propagates and evicts nobody."""
        placement = Pool(UIDS[:2])
        placement.workers[UIDS[0]].answer = KeyError("bug")
        with pytest.raises(KeyError):
            await placement.place(task())
        assert set(placement.roster.workers) == set(UIDS[:2]) and placement.closed == []


class TestPlainPlacement:
    async def test_place_should_prefer_workers_running_none_of_our_plain_calls_then_places_in_line(self):
        """Test the two passes: an idle worker first (whatever its uid), then the lowest with a place in its line."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        assert (await placement.place(task(plain=True))).uid == UIDS[0]
        assert (await placement.place(task(plain=True))).uid == UIDS[1]  # UIDS[0] runs one of ours
        assert (await placement.place(task(plain=True))).uid == UIDS[0]  # a place in line
        assert (await placement.place(task(plain=True))).uid == UIDS[1]
        assert not placement.placement.may_take(task(plain=True))  # each line full of ours
        assert placement.placement.may_take(task())  # async work still may go
        with pytest.raises(pool.NoWorkersAvailable):
            await placement.place(task(plain=True))

    async def test_a_plain_call_ending_should_free_its_place_and_ask_back_a_call_queued_elsewhere(self):
        """Test that a worker left with none of ours asks another for a call still waiting in its line."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        running = await placement.place(task(plain=True))
        other = await placement.place(task(plain=True))
        placement.workers[UIDS[0]].state = QUEUED
        queued = await placement.place(task(plain=True))
        assert (running.uid, other.uid, queued.uid) == (UIDS[0], UIDS[1], UIDS[0])
        other.end()
        assert queued.handed_back
        assert placement.placement.may_take(task(plain=True))

    async def test_a_late_queued_accept_should_ask_the_call_back_for_a_worker_that_went_idle_meanwhile(self):
        """Test the race a worker's late Accept(queued) opens: the idle worker found nothing to ask back, then it came."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        await placement.place(task(plain=True))
        other = await placement.place(task(plain=True))
        placement.workers[UIDS[0]].state = SENT  # its Accept has not come yet
        queued = await placement.place(task(plain=True))
        other.end()  # UIDS[1] is idle: nothing it knows of is queued
        assert queued.uid == UIDS[0] and not queued.handed_back
        queued.state = QUEUED  # the Accept came
        placement.placement.queued(UIDS[0])
        assert queued.handed_back

    async def test_a_call_queued_behind_someone_elses_should_not_be_asked_back(self):
        """Test that a call queued on a worker running none of ours stays: asking it back could go round and round."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        placement.workers[UIDS[0]].state = QUEUED  # (busy with another pool's call)
        queued = await placement.place(task(plain=True))
        assert queued.uid == UIDS[0]
        placement.placement.queued(UIDS[0])  # UIDS[1] is idle, yet this call came in the idle pass
        assert not queued.handed_back

    async def test_feed_idle_should_ask_back_one_queued_call_for_each_worker_that_joined(self):
        """Test that workers joining while calls wait in others' lines each get one asked back, no more."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        await placement.place(task(plain=True))
        await placement.place(task(plain=True))
        for connection in placement.workers.values():
            connection.state = QUEUED
        queued = [await placement.place(task(plain=True)) for _ in range(2)]
        placement.placement.feed_idle()
        assert not any(call.handed_back for call in queued)  # no worker is idle
        for uid in UIDS[2:4]:
            placement.workers[uid] = Connection(uid, placement.offers)
            placement.roster.add(placement.workers[uid])  # type: ignore[arg-type]
        placement.placement.feed_idle()
        assert [call.handed_back for call in queued] == [True, True]

    async def test_feed_idle_should_pass_over_refusing_or_full_workers_and_wait_for_the_queue(self):
        """Test that a joined worker known full or refusing plain calls gets nothing, nor one while calls queue."""
        placement = Pool(UIDS[:3], plain_prefetch=1)
        await placement.place(task(plain=True))
        busy = await placement.place(task(plain=True))
        placement.workers[UIDS[0]].state = QUEUED
        placement.roster.room.rejected(UIDS[2], placement.roster.room.offer(UIDS[2]))  # known full
        queued = await placement.place(task(plain=True))
        assert queued.uid == UIDS[0]
        placement.placement.feed_idle()
        assert not queued.handed_back  # UIDS[2], the one without a call of ours, is full
        placement.roster.room.announced(UIDS[2])
        placement.placement.refused(
            UIDS[2], pool.WorkerRejected("worker w: busy"), placement.roster.room.offer(UIDS[2])
        )
        placement.placement.feed_idle()
        assert not queued.handed_back  # refusing plain calls
        placement.placement.doubt_refusals()
        placement.placement.waiting = lambda: True
        placement.placement.feed_idle()
        assert not queued.handed_back  # calls wait in the pool's queue: the idle worker is fed from there
        placement.placement.waiting = lambda: False
        placement.placement.feed_idle()
        assert queued.handed_back and not busy.handed_back  # (a started call is never asked back)

    async def test_a_plain_call_ending_should_not_ask_back_while_calls_wait_for_a_worker(self):
        """Test that an idle worker is fed from the pool's queue rather than stealing from another's line."""
        placement = Pool(UIDS[:2], plain_prefetch=1)
        placement.placement.waiting = lambda: True
        await placement.place(task(plain=True))
        other = await placement.place(task(plain=True))
        placement.workers[UIDS[0]].state = QUEUED
        queued = await placement.place(task(plain=True))
        other.end()
        assert not queued.handed_back

    async def test_send_plain_should_send_to_the_first_worker_with_a_place_and_refused_pass_it_over(self):
        """Test placing without awaiting the answer, and a worker that turned a plain call away skipped until doubted."""
        placement = Pool(UIDS[:2], plain_prefetch=0)
        sent = placement.placement.send_plain(task(plain=True))
        assert sent is not None
        uid, epoch, call = sent
        assert uid == UIDS[0] and call in placement.workers[UIDS[0]].calls
        placement.placement.refused(uid, pool.WorkerRejected("worker w: busy"), epoch)
        call.state = 0  # never accepted
        call.end()  # (the refused call ends: its place is free, the refusal stands)
        again = placement.placement.send_plain(task(plain=True))
        assert again is not None and again[0] == UIDS[1]  # passed over
        assert placement.placement.send_plain(task(plain=True)) is None  # UIDS[1] runs one; UIDS[0] refuses
        placement.placement.doubt_refusals()
        later = placement.placement.send_plain(task(plain=True))
        assert later is not None and later[0] == UIDS[0]

    async def test_a_plain_call_given_up_at_its_deadline_should_hand_a_worker_still_there_to_overdue(self):
        """Test that a worker whose plain call's caller gave up at the deadline is handed over after the grace."""
        placement = Pool(UIDS[:1])
        overdue: asyncio.Queue[uuid.UUID] = asyncio.Queue()
        placement.placement.overdue = overdue.put_nowait
        late = task(plain=True)
        call = await placement.place(late)
        late.deadline = 0.0  # long past
        call.cancelled_here = True
        loop = asyncio.get_running_loop()
        ended_at = loop.time()
        call.end()
        assert await asyncio.wait_for(overdue.get(), WAIT_S) == UIDS[0]
        assert loop.time() - ended_at >= OVERDUE_GRACE_S * 0.9

    async def test_a_plain_call_that_ended_in_time_should_not_be_overdue(self):
        """Test that an ordinary end (not cancelled here, or before its deadline) hands nobody over."""
        placement = Pool(UIDS[:1])
        handed: list[uuid.UUID] = []
        placement.placement.overdue = handed.append
        in_time = task(plain=True)
        call = await placement.place(in_time)
        in_time.deadline = time.monotonic() + 3600
        call.cancelled_here = True
        call.end()
        await asyncio.sleep(OVERDUE_GRACE_S + 0.1)  # (bounded: when right, nothing is ever handed over)
        assert handed == []
