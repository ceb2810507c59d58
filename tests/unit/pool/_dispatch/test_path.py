"""Tests for pool._dispatch._path: every decision a call meets on its way to a worker, one owner for all of them.

A real `CallPath`, `Membership`, `Roster`, `Limits` and the built-in balancers; each worker's connection is a
small fake that opens real `OutgoingCall`s and answers them as the test says (a loop turn later, as a peer
would). The whole path with real workers is in tests/integration/dispatch/.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pool
from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from pool._base._exit import DRAINING_MESSAGE
from pool._call._task import CallRecord
from pool._dispatch._membership import Membership
from pool._dispatch._path import OVERDUE_GRACE_S, CallPath
from pool._transport._outgoing import QUEUED, SENT, OutgoingCall
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import FAILED_PRECONDITION, MISMATCH_MESSAGE, RESOURCE_EXHAUSTED, UNAVAILABLE
from pool._transport._trust import Trust
from pool._transport._wire import INTERPRETER
from tests.integration.support.helpers import eventually

WAIT_S = 5.0
UIDS = [uuid.UUID(int=i) for i in range(1, 7)]


class Stream:
    """The session a fake worker's calls live on: what an `OutgoingCall` needs of one (its steps recorded)."""

    def __init__(self) -> None:
        self.label = "worker w"
        self.failure: BaseException | None = None
        self.written = 1 << 40  # every call "left"
        self.steps: list[tuple[int, int]] = []

    def step(self, call_id: int, kind: int, value: bytes = b"") -> None:
        self.steps.append((call_id, kind))

    def forget(self, call_id: int) -> None:
        pass


class Worker:
    """One worker's connection: each call it is sent gets the next of ``answers``, else ``answer``.

    An answer: "accept", "queued" (accepted to wait behind another plain call), "busy", "full" (busy at its
    capacity), "draining", "broken" (a hard code), "mismatch" (it runs another Python than the call's code), an exception (the stream's end, or a bug), or a future
    (the worker answers "accept" once it is done).
    """

    def __init__(self, world: World, uid: uuid.UUID) -> None:
        self.world = world
        self.metadata = pool.WorkerMetadata(uid=uid, address="127.0.0.1:1")
        self.stream = Stream()
        self.answer: Any = "accept"
        self.answers: collections.deque[Any] = collections.deque()
        self.calls: list[OutgoingCall] = []
        self.broken = False
        self.closed = False

    def open(self, task: CallRecord) -> OutgoingCall:
        self.world.offers.append(self.metadata.uid)
        call = OutgoingCall(self.stream, 2 * len(self.calls) + 1, task.name, plain=task.plain)
        self.calls.append(call)
        answer = self.answers.popleft() if self.answers else self.answer
        if isinstance(answer, asyncio.Future):
            self.world.at_gate.put_nowait(task.name)
            answer.add_done_callback(lambda _: self._reply(call, "accept"))
        else:
            asyncio.get_running_loop().call_soon(self._reply, call, answer)
        return call

    def _reply(self, call: OutgoingCall, answer: Any) -> None:
        if isinstance(answer, BaseException):
            call.deliver(answer)
            return
        frame = pb.Frame(id=call.id)
        if answer in ("accept", "queued"):
            frame.accept.queued = answer == "queued"
            frame.accept.SetInParent()
        else:
            code, message = {
                "busy": (RESOURCE_EXHAUSTED, "busy"),
                "full": (RESOURCE_EXHAUSTED, "busy"),
                "draining": (UNAVAILABLE, DRAINING_MESSAGE),
                "broken": (FAILED_PRECONDITION, "a protocol error"),
                "mismatch": (UNAVAILABLE, f"{MISMATCH_MESSAGE}: it runs cpython-3.99"),
            }[answer]
            frame.reject.code = code
            frame.reject.message = message
            if answer == "full":
                frame.reject.in_flight = frame.reject.capacity = 1
        call.reply(frame)

    async def close(self) -> None:
        self.closed = True


class World:
    """A call path over fake workers, with what it closes, grows and hands over recorded."""

    def __init__(
        self,
        uids: list[uuid.UUID] = UIDS[:1],
        *,
        balancer: Any = None,
        plain_prefetch: int = 0,
        queue_depth: int = 0,
        admission_timeout: float = 0.0,
        max_pending: int | None = None,
    ) -> None:
        self.offers: list[uuid.UUID] = []
        self.closed: list[Any] = []
        self.at_gate: asyncio.Queue[str] = asyncio.Queue()
        self.starved = 0
        self.freed = 0
        self.coming = False
        self.stranded: BaseException | None = None
        self.overdue: list[uuid.UUID] = []
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
        self.workers: dict[uuid.UUID, Worker] = {}
        for uid in uids:
            self.add(uid)
        self.path = CallPath(
            balancer or PriorityLoadBalancer(),
            self.membership,
            self.closed.extend,
            queue_depth=queue_depth,
            admission_timeout=admission_timeout,
            max_pending=max_pending,
            default_deadline=WAIT_S,
            plain_prefetch=plain_prefetch,
            freed=self._freed,
            starved=self._starve,
            coming=lambda draining: self.coming,
            stranded=lambda: self.stranded,
            overdue=self.overdue.append,
        )
        self.path.state = "open"

    def add(self, uid: uuid.UUID) -> Worker:
        worker = self.workers[uid] = Worker(self, uid)
        self.roster.add(worker)  # type: ignore[arg-type]
        return worker

    def _starve(self) -> None:
        self.starved += 1

    def _freed(self) -> None:
        self.freed += 1

    async def dispatch(self, name: str = "f", **kwargs: Any) -> OutgoingCall:
        return await asyncio.wait_for(self.path.dispatch(task(name, **kwargs)), WAIT_S)

    def start(self, name: str = "f", **kwargs: Any) -> asyncio.Task[OutgoingCall]:
        return asyncio.ensure_future(self.dispatch(name, **kwargs))

    async def place(self, name: str = "f", **kwargs: Any) -> OutgoingCall:
        """One pass over the workers, as a job's attempt makes it (no ticket, no line)."""
        return await asyncio.wait_for(self.path._place(task(name, **kwargs)), WAIT_S)

    async def waiting(self, count: int) -> None:
        await eventually(lambda: self.path.waiting == count, timeout=WAIT_S, interval=0.001)

    def room(self, uid: uuid.UUID, places: int) -> None:
        """Worker ``uid`` has ``places`` more calls' room, and says so (its Room frame)."""
        self.workers[uid].answers.extend(["accept"] * places)
        self.roster.room.announced(uid)
        self.path.capacity_changed()

    def names(self) -> list[str]:
        """The names of the calls accepted so far, in order (for FIFO checks)."""
        return [call.name for worker in self.workers.values() for call in worker.calls if call.state]

    def close(self) -> None:
        self.path.close(pool.PoolClosed("the test's pool closed"))


def task(
    name: str = "f",
    *,
    plain: bool = False,
    priority: int = 0,
    deadline: float | None = None,
    queue: pool.Queue | None = None,
    interpreter: str = "",
    build: str = "",
) -> CallRecord:
    return CallRecord(
        name,
        False,
        b"digest",
        b"",
        b"",
        plain=plain,
        priority=priority,
        dispatch_deadline=deadline,
        queue=queue.name if queue else "",
        concurrency=queue.concurrency if queue else 0,
        interpreter=interpreter,
        build=build,
    )


def end(call: OutgoingCall, value: Any = None) -> None:
    """The worker answers ``call``'s outcome: it ends (its ticket and places are freed)."""
    frame = pb.Frame(id=call.id)
    frame.outcome.kind = pb.Outcome.RETURN
    call.reply(frame)


# -- the ceiling (was test_admission.TestCeiling) ------------------------------------------------------


class TestCeiling:
    def test_admit_should_refuse_with_a_retry_hint_when_max_pending_calls_are_admitted(self):
        """Test the fast gate: past max_pending admitted calls a call is refused at once, counted, and a call
        that ends lets the next one in."""
        path = bare_path(max_pending=2)
        first, _ = path.admit(task(), None), path.admit(task(), None)
        with pytest.raises(
            pool.AdmissionRejected, match=r"f\(\) refused: 2 calls already admitted \(max_pending=2\)"
        ) as caught:
            path.admit(task(), None)
        assert caught.value.retry_after == path.retry_after() and path.rejected == 1
        path._ended(first, None, None)
        assert path.admit(task(), None).task.name == "f" and path.admitted == 2

    def test_admit_should_number_calls_in_arrival_order_without_a_ceiling(self):
        """Test that with no max_pending every call is admitted, each a later place in the arrival order."""
        path = bare_path()
        seqs = [path.admit(task(), None).seq for _ in range(100)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 100 and path.rejected == 0

    def test_admit_should_give_a_call_handed_back_its_old_place_in_the_arrival_order(self):
        """Test that a task admitted again (a plain call handed back unstarted) keeps its place: it is not last."""
        path = bare_path()
        handed_back = task()
        first = path.admit(handed_back, None)
        later = [path.admit(task(), None).seq for _ in range(3)]
        path._ended(first, None, None)
        again = path.admit(handed_back, None)
        assert again.seq == first.seq < min(later)

    def test_release_should_move_the_mean_duration_a_tenth_of_the_way_to_the_calls_duration(self):
        """Test the running mean behind retry_after: the newest call weighs DURATION_HALF_LIFE."""
        path = bare_path()
        ticket = path.admit(task(), None)
        ticket.admitted_at = time.monotonic() - 11.0  # an 11 s call
        path._ended(ticket, None, None)
        assert path.mean_duration == pytest.approx(2.0, abs=0.01) and path.admitted == 0

    @given(durations=st.lists(st.floats(0, 1e6), max_size=20), running=st.integers(0, 1000))
    def test_retry_after_should_stay_between_50_ms_and_a_minute(self, durations, running):
        """Test that the hint a refused caller gets is never 0 (a hot retry loop) nor longer than a minute."""
        path = bare_path()
        now = time.monotonic()
        for duration in durations:
            ticket = path.admit(task(), None)
            ticket.admitted_at = now - duration
            path._ended(ticket, None, None)
        for _ in range(running):
            path.admit(task(), None)
        assert 0.05 <= path.retry_after() <= 60.0


def bare_path(**kwargs: Any) -> CallPath:
    """A call path with no worker, for what needs no loop (admission counts)."""
    fields: dict[str, Any] = {"queue_depth": 0, "admission_timeout": 0, "max_pending": None, "default_deadline": WAIT_S}
    return CallPath(PriorityLoadBalancer(), _membership_only(), lambda c: None, **(fields | kwargs))


def _membership_only() -> Membership:
    return Membership(
        None,  # type: ignore[arg-type]
        credentials=None,
        trust=Trust.of("a key"),
        tags=(),
        changed=lambda: None,
        close=lambda c: None,
        is_local=lambda uid: False,
        broken_local=lambda uid: None,
    )


# -- one pass over the workers (was test_placement.TestPlacement) ---------------------------------------------


class TestPlacement:
    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.sampled_from(["accept", "busy", "full", "broken"]), min_size=1, max_size=6))
    def test_place_should_offer_in_ascending_uid_order_and_stop_at_the_first_accept(self, answers):
        """Test the leaky bucket: lowest uid first, each refusal reported back, the first accept ends the offers.

        Busy workers are kept, full ones marked known full, broken ones evicted and closed; none accepting
        is `NoWorkersAvailable` caused by the last refusal.
        """
        asyncio.run(self._offer_in_order(answers))

    @staticmethod
    async def _offer_in_order(answers: list[str]) -> None:
        world = World(UIDS[: len(answers)])
        for uid, answer in zip(UIDS, answers, strict=False):
            world.workers[uid].answer = answer
        first = answers.index("accept") if "accept" in answers else None
        if first is None:
            with pytest.raises(pool.NoWorkersAvailable) as info:
                await world.place()
            last = answers[-1]
            assert isinstance(info.value.__cause__, pool.WorkerBroken if last == "broken" else pool.WorkerRejected)
            assert world.offers == UIDS[: len(answers)]
        else:
            call = await world.place()
            assert call in world.workers[UIDS[first]].calls
            assert world.offers == UIDS[: first + 1]
            assert world.path.dispatched == 1
        tried = answers[: len(world.offers)]
        broken = [UIDS[i] for i, answer in enumerate(tried) if answer == "broken"]
        full = {UIDS[i] for i, answer in enumerate(tried) if answer == "full"}
        assert [c.metadata.uid for c in world.closed] == broken  # evicted, handed over to be closed
        assert not set(broken) & set(world.roster.workers)
        assert set(world.roster.known_full) == full

    async def test_place_should_skip_a_worker_known_full_until_it_announces_room(self):
        """Test that a worker that said it is full is not asked again (no round trip) until it has room."""
        world = World(UIDS[:2])
        world.workers[UIDS[0]].answers.append("full")
        assert await world.place() in world.workers[UIDS[1]].calls
        world.offers.clear()
        assert await world.place() in world.workers[UIDS[1]].calls
        assert world.offers == [UIDS[1]]  # the full one was passed over
        world.roster.room.announced(UIDS[0])
        assert await world.place() in world.workers[UIDS[0]].calls

    async def test_place_should_say_no_worker_has_room_when_every_worker_is_known_full(self):
        """Test the message when no worker was even asked: all turned this pool away and owe it a Room."""
        world = World(UIDS[:2])
        for worker in world.workers.values():
            worker.answer = "full"
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted"):
            await world.place()
        world.offers.clear()
        with pytest.raises(
            pool.NoWorkersAvailable, match=r"no worker has room for f\(\): 2 of 2 turned this pool away"
        ):
            await world.place()
        assert world.offers == []
        world.path.doubt()  # the line's backstop: offer them again
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted"):
            await world.place()
        assert world.offers == UIDS[:2]

    async def test_place_should_raise_pool_is_empty_when_there_are_no_workers(self):
        """Test the message of an empty pool."""
        with pytest.raises(pool.NoWorkersAvailable, match="the pool is empty"):
            await World([]).place()

    async def test_place_should_note_a_draining_worker(self):
        """Test that a worker that turned a call away as draining is noted for the pool to prune."""
        world = World(UIDS[:2])
        world.workers[UIDS[0]].answer = "draining"
        assert await world.place() in world.workers[UIDS[1]].calls
        assert world.path.draining == {UIDS[0]}
        assert UIDS[0] in world.roster  # still a member: it finishes its calls

    async def test_place_should_skip_a_uid_that_left_the_pool_since_the_balancer_looked(self):
        """Test that a balancer offering a worker no longer in the roster gets told "next" (None)."""
        sent: list[object] = []

        class Stale:
            async def delegate(self, task, *, context):
                sent.append((yield uuid.UUID(int=999)))
                sent.append((yield UIDS[0]))

        world = World(UIDS[:1], balancer=Stale())
        assert await world.place() in world.workers[UIDS[0]].calls
        assert sent == [None, UIDS[0]]

    async def test_place_should_cancel_the_call_and_raise_when_the_balancer_offers_another_worker_after_a_success(self):
        """Test that a balancer breaking the contract fails loudly rather than running the task twice."""

        class Greedy:
            async def delegate(self, task, *, context):
                yield UIDS[0]
                yield UIDS[1]

        world = World(UIDS[:2], balancer=Greedy())
        with pytest.raises(RuntimeError, match="offered another worker after a success"):
            await world.place()
        (call,) = world.workers[UIDS[0]].calls
        assert call.cancelled_here

    async def test_place_should_propagate_anything_else_and_change_no_membership(self):
        """Test that a bug (not a rejection) in a worker's answer propagates and evicts nobody."""
        world = World(UIDS[:2])
        world.workers[UIDS[0]].answer = KeyError("bug")
        with pytest.raises(KeyError):
            await world.place()
        assert set(world.roster.workers) == set(UIDS[:2]) and world.closed == []

    @pytest.mark.parametrize("make", [PriorityLoadBalancer, RoundRobinLoadBalancer])
    async def test_a_balancer_with_an_order_should_be_offered_as_its_delegate_would(self, make):
        """Test that the built-ins' `order` (what the path uses) agrees with their `delegate` (what wool drives),
        full workers skipped, a round robin's cursor moved on once per dispatch (was test_sends.TestFirst)."""

        class Delegating:  # the same balancer, driven through its generator (it shows no `order`)
            def __init__(self, inner: Any) -> None:
                self.inner = inner

            def delegate(self, task, *, context):
                return self.inner.delegate(task, context=context)

        by_order, by_delegate = World(UIDS[:3], balancer=make()), World(UIDS[:3], balancer=Delegating(make()))
        for world in (by_order, by_delegate):
            world.roster.room.rejected(UIDS[1], 0)  # known full
            for _ in range(4):
                await world.place()
        assert by_order.offers == by_delegate.offers


# -- without a queue (was test_admission.TestNoQueue) --------------------------------------------------------


class TestNoQueue:
    async def test_dispatch_should_place_at_once_when_a_worker_has_room(self):
        """Test that a call a worker takes never waits: nothing queued, no growth asked for."""
        world = World(queue_depth=4)
        call = await world.dispatch()
        assert (call.name, world.path.waiting, world.starved) == ("f", 0, 0)

    async def test_dispatch_should_raise_no_workers_available_and_ask_for_workers_when_there_is_no_queue(self):
        """Test fail fast: without a queue a call no worker took fails at once, and the pool is told to grow."""
        world = World()
        world.workers[UIDS[0]].answer = "full"
        with pytest.raises(pool.NoWorkersAvailable, match=r"no worker accepted f\(\)"):
            await world.dispatch()
        assert (world.starved, world.path.waiting, world.path.admitted) == (1, 0, 0)

    async def test_dispatch_should_raise_what_stranded_says_when_no_worker_can_start(self):
        """Test that with a queue, a call that finds no worker while none can start ends with that reason, unqueued."""
        world = World([], queue_depth=4)
        world.stranded = RuntimeError("the worker initializer failed")
        with pytest.raises(RuntimeError, match="initializer failed"):
            await world.dispatch()
        assert world.path.waiting == 0

    async def test_dispatch_should_wait_for_a_worker_on_its_way_when_there_is_no_queue(self):
        """Test that a recycle never fails a call: without a queue a call waits for a worker that is coming."""
        world = World([])
        world.coming = True
        waiting = world.start()
        await world.waiting(1)
        world.add(UIDS[0])
        world.path.capacity_changed()
        assert (await waiting).name == "f"

    async def test_dispatch_should_end_with_no_workers_available_when_the_coming_worker_did_not_come(self):
        """Test that a call waiting (without a queue) for a worker that then does not come ends, not hangs."""
        world = World([])
        world.coming = True
        waiting = world.start()
        await world.waiting(1)
        world.coming = False
        world.path.capacity_changed()
        with pytest.raises(pool.NoWorkersAvailable, match="the worker it waited for did not come"):
            await waiting
        assert world.path.waiting == 0


class TestVersions:
    """A call goes only to workers of its build, and one carrying code by value to workers of the Python that made
    it (issue 54)."""

    async def test_dispatch_should_pass_over_a_worker_whose_record_names_another_python(self):
        """Test that no round trip is spent on a worker known to run another Python; calls by reference go there."""
        world = World(UIDS[:2])
        world.roster.refresh(dataclasses.replace(world.workers[UIDS[0]].metadata, interpreter="cpython-3.99"))
        call = await world.dispatch(interpreter=INTERPRETER)
        assert call in world.workers[UIDS[1]].calls and world.offers == [UIDS[1]]
        await world.dispatch()  # by reference: the lowest uid, as ever
        assert world.offers == [UIDS[1], UIDS[0]]

    async def test_dispatch_should_raise_version_mismatch_at_once_naming_both_when_no_worker_runs_its_python(self):
        """Test that a queue does not hold a call no member can ever run, and that no worker is asked."""
        world = World(UIDS[:1], queue_depth=4)
        world.roster.refresh(dataclasses.replace(world.workers[UIDS[0]].metadata, interpreter="cpython-3.99"))
        with pytest.raises(
            pool.VersionMismatch, match=rf"needs a worker of {INTERPRETER} \(its code is pickled"
        ) as info:
            await world.dispatch(interpreter=INTERPRETER)
        assert "cpython-3.99" in str(info.value)
        assert (world.offers, world.path.waiting, world.path.admitted) == ([], 0, 0)

    async def test_dispatch_should_raise_version_mismatch_when_a_worker_silent_on_its_python_declines_for_it(self):
        """Test an older worker's record (no interpreter): offered, it declines, and the caller learns why."""
        world = World(UIDS[:1], queue_depth=4)
        world.workers[UIDS[0]].answer = "mismatch"
        with pytest.raises(pool.VersionMismatch):
            await world.dispatch(interpreter=INTERPRETER)
        assert world.offers == [UIDS[0]] and world.path.waiting == 0

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.sampled_from(["", "v1", "v2"]), min_size=1, max_size=5),
        st.sampled_from(["", "v1", "v2"]),
        st.sampled_from(["", "v1"]),
    )
    def test_a_call_should_be_offered_exactly_to_the_workers_of_its_build_in_uid_order(self, builds, own, pinned):
        """Test the rule: a call names its job's pinned build, else this process's; it is offered to the workers
        of that build alone, lowest uid first (any worker when it names none); with none, VersionMismatch naming
        the build wanted and those there."""
        asyncio.run(self._offered_by_build(builds, own, pinned))

    @staticmethod
    async def _offered_by_build(builds: list[str], own: str, pinned: str) -> None:
        world = World(UIDS[: len(builds)])
        world.path.build = own
        for uid, build in zip(UIDS, builds, strict=False):
            world.workers[uid].answer = "busy"
            world.roster.refresh(dataclasses.replace(world.workers[uid].metadata, build=build))
        wanted = pinned or own
        expected = [uid for uid, build in zip(UIDS, builds, strict=False) if not wanted or build == wanted]
        error = pool.VersionMismatch if not expected else pool.NoWorkersAvailable
        with pytest.raises(error) as info:
            await asyncio.wait_for(world.path.place_job(task(build=pinned)), WAIT_S)  # a job's attempt: stamped there
        assert world.offers == expected
        if not expected:
            assert f"needs a worker of build {wanted}" in str(info.value)
            assert all(f"build {b or '(none)'}" in str(info.value) for b in builds)


# -- the line (was test_admission.TestQueue) -------------------------------------------------------------


class TestLine:
    async def test_dispatch_should_start_waiting_calls_in_arrival_order_as_capacity_frees(self):
        """Test FIFO: a burst that found no worker starts in the order it arrived, one per freed place."""
        world = World(queue_depth=10)
        world.workers[UIDS[0]].answer = "full"
        calls = [world.start(name) for name in "abcd"]
        await world.waiting(4)
        for places in (1, 2, 1):
            world.room(UIDS[0], places)
            await eventually(lambda: not world.workers[UIDS[0]].answers, timeout=WAIT_S, interval=0.001)
        assert [c.name for c in await asyncio.gather(*calls)] == list("abcd")
        assert world.names() == list("abcd")

    async def test_dispatch_should_wait_without_a_timer_when_its_deadline_is_years_away(self):
        """Test that a call with no real bound (pool.Executor's) waits and is served like any other, and that a
        bounded one still has its deadline armed beside it."""
        world = World(queue_depth=10)
        world.workers[UIDS[0]].answer = "full"
        unbounded = world.start("executor", deadline=10 * 365 * 24 * 3600.0)
        bounded = world.start("bounded", deadline=0.05)
        await world.waiting(2)
        with pytest.raises(pool.CapacityTimeout):
            await bounded
        world.room(UIDS[0], 1)
        assert (await unbounded).name == "executor"

    async def test_dispatch_should_start_a_higher_priority_call_first_when_it_arrives_later(self):
        """Test that the line is ordered by priority, then arrival."""
        world = World(queue_depth=10)
        world.workers[UIDS[0]].answer = "full"
        calls = [
            world.start("low1"),
            world.start("low2"),
            world.start("high", priority=5),
            world.start("mid", priority=1),
        ]
        await world.waiting(4)
        world.room(UIDS[0], 4)
        await asyncio.gather(*calls)
        assert world.names() == ["high", "mid", "low1", "low2"]

    async def test_dispatch_should_queue_in_admission_order_when_rejections_come_back_out_of_order(self):
        """Test that two calls refused at the same moment wait in the order they were admitted, not the order
        their refusals came back in."""
        loop = asyncio.get_running_loop()
        world = World(queue_depth=10)
        worker = world.workers[UIDS[0]]
        gate_a, gate_b = loop.create_future(), loop.create_future()
        worker.answers.extend([gate_a, gate_b])
        # The gates hold the Accept: refuse instead, as busy workers do, once opened.
        worker._reply = _refusing_gated(worker._reply, {gate_a, gate_b})  # type: ignore[method-assign]
        a = world.start("a")
        assert await asyncio.wait_for(world.at_gate.get(), WAIT_S) == "a"
        b = world.start("b")  # the line is still empty: it is offered at once too
        assert await asyncio.wait_for(world.at_gate.get(), WAIT_S) == "b"
        gate_b.set_result(None)  # b's refusal comes back first...
        await world.waiting(1)
        gate_a.set_result(None)  # ...a's after it
        await world.waiting(2)
        world.room(UIDS[0], 2)
        await asyncio.gather(a, b)
        assert [c.name for c in worker.calls if c.state] == ["a", "b"]

    async def test_dispatch_should_refuse_at_once_when_the_queue_is_full_and_there_is_no_admission_timeout(self):
        """Test that a full line with admission_timeout 0 refuses the next call, counted, with a hint."""
        world = World(queue_depth=1)
        world.workers[UIDS[0]].answer = "full"
        first = world.start("a")
        await world.waiting(1)
        with pytest.raises(pool.AdmissionRejected, match=r"b\(\) refused: the queue is full \(1 waiting\)"):
            await world.dispatch("b")
        assert (world.path.rejected, world.path.waiting) == (1, 1)
        world.room(UIDS[0], 1)
        await first

    async def test_dispatch_should_move_from_the_lobby_into_the_queue_when_a_place_frees(self):
        """Test that a call waiting for a place in a full line takes the place a leaving call frees."""
        world = World(queue_depth=1, admission_timeout=WAIT_S)
        world.workers[UIDS[0]].answer = "full"
        leaving = world.start("a")
        await world.waiting(1)
        lobby = world.start("b")
        await world.waiting(2)
        leaving.cancel()
        await world.waiting(1)
        world.room(UIDS[0], 1)
        assert (await lobby).name == "b" and world.names() == ["b"]

    async def test_dispatch_should_refuse_when_the_queue_stays_full_for_the_admission_timeout(self):
        """Test that a call waits at most admission_timeout for a place in the line, then is refused."""
        world = World(queue_depth=1, admission_timeout=0.05)
        world.workers[UIDS[0]].answer = "full"
        first = world.start("a")
        await world.waiting(1)
        with pytest.raises(pool.AdmissionRejected, match=r"the queue stayed full \(1 waiting\) for 0.05s"):
            await world.dispatch("b")
        assert (world.path.rejected, world.path.waiting) == (1, 1)
        world.room(UIDS[0], 1)
        await first


def _refusing_gated(reply: Any, gates: set[asyncio.Future[None]]) -> Any:
    """A worker's `_reply` that answers a call held at one of ``gates`` with "busy" (not "accept")."""
    held: list[OutgoingCall] = []

    def replying(call: OutgoingCall, answer: Any) -> None:
        if answer == "accept" and held.count(call) == 0 and len(held) < len(gates):
            held.append(call)
            reply(call, "busy")
            return
        reply(call, answer)

    return replying


# -- how a wait ends (was test_admission.TestWaitingEnds) --------------------------------------------------------


class TestWaitingEnds:
    async def test_dispatch_should_raise_capacity_timeout_and_leave_the_line_when_its_deadline_passes(self):
        """Test that a waiting call's dispatch deadline ends its wait and frees its place."""
        world = World(queue_depth=4)
        world.workers[UIDS[0]].answer = "full"
        with pytest.raises(pool.CapacityTimeout):
            await world.dispatch(deadline=0.05)
        assert (world.path.waiting, world.path.admitted) == (0, 0)

    async def test_dispatch_should_leave_the_line_when_its_caller_gives_up(self):
        """Test that a cancelled waiter frees its place at once and is never placed."""
        world = World(queue_depth=4)
        world.workers[UIDS[0]].answer = "full"
        gone, kept = world.start("a"), world.start("b")
        await world.waiting(2)
        gone.cancel()
        await world.waiting(1)
        world.room(UIDS[0], 1)
        assert (await kept).name == "b" and world.names() == ["b"]

    async def test_dispatch_should_hand_a_placement_fault_to_its_caller_and_serve_the_next(self):
        """Test that an unexpected placement error ends only the call it happened to."""
        world = World(queue_depth=4)
        worker = world.workers[UIDS[0]]
        worker.answer = "full"
        broken, kept = world.start("a"), world.start("b")
        await world.waiting(2)
        worker.answers.extend([RuntimeError("a bug in a worker's stream"), "accept"])
        world.roster.room.announced(UIDS[0])
        world.path.capacity_changed()
        with pytest.raises(RuntimeError, match="a bug in a worker's stream"):
            await broken
        assert (await kept).name == "b"

    async def test_dispatch_should_end_with_what_stranded_says_when_no_worker_can_come_while_it_waits(self):
        """Test that waiting calls end at once, with the reason, when the last worker is gone for good."""
        world = World(queue_depth=4)
        world.workers[UIDS[0]].answer = "full"
        calls = [world.start("a"), world.start("b")]
        await world.waiting(2)
        world.stranded = RuntimeError("the worker initializer failed")
        world.path.doubt()
        world.path.capacity_changed()
        for call in calls:
            with pytest.raises(RuntimeError, match="initializer failed"):
                await call
        assert world.path.waiting == 0

    async def test_close_should_fail_every_waiting_call_with_the_pools_error_and_refuse_new_ones(self):
        """Test that closing the pool ends waiting and lobby calls with its PoolClosed, and dispatch refuses after."""
        world = World(queue_depth=1, admission_timeout=WAIT_S)
        world.workers[UIDS[0]].answer = "full"
        calls = [world.start("a"), world.start("b")]
        await world.waiting(2)
        error = pool.PoolClosed("the pool closed")
        world.path.close(error)
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert results == [error, error] and world.path.waiting == 0
        with pytest.raises(pool.PoolClosed, match=r"f\(\) was dispatched through a pool that is closed"):
            await world.dispatch()
        with pytest.raises(pool.PoolClosed):  # (a job's attempt too)
            await world.path.place_job(task())


# -- plain calls (was test_placement.TestPlainPlacement and test_sends.TestAnswers) ----------------------------


class TestPlain:
    async def test_place_should_prefer_workers_running_none_of_our_plain_calls_then_places_in_line(self):
        """Test the two passes: an idle worker first (whatever its uid), then the lowest with a place in its line."""
        world = World(UIDS[:2], plain_prefetch=1)
        placed = [await world.place(plain=True) for _ in range(4)]
        owners = [next(uid for uid, w in world.workers.items() if call in w.calls) for call in placed]
        assert owners == [UIDS[0], UIDS[1], UIDS[0], UIDS[1]]  # idle ones first, then places in line
        with pytest.raises(pool.NoWorkersAvailable):
            await world.place(plain=True)  # each line full of ours
        assert world.offers == owners  # and the full lines were not even asked
        assert await world.place() in world.workers[UIDS[0]].calls  # async work still may go

    async def test_a_plain_call_ending_should_free_its_place_and_ask_back_a_call_queued_elsewhere(self):
        """Test that a worker left with none of ours asks another for a call still waiting in its line."""
        world = World(UIDS[:2], plain_prefetch=1)
        await world.place(plain=True)
        other = await world.place(plain=True)
        world.workers[UIDS[0]].answer = "queued"
        queued = await world.place(plain=True)
        assert queued in world.workers[UIDS[0]].calls and queued.state == QUEUED
        end(other)
        assert queued.recalled  # asked back (its worker answers with a Reject: `HandedBack`)
        assert await world.place(plain=True) in world.workers[UIDS[1]].calls

    async def test_a_late_queued_accept_should_ask_the_call_back_for_a_worker_that_went_idle_meanwhile(self):
        """Test the race a worker's late Accept(queued) opens: the idle worker found nothing to ask back, then it came."""
        world = World(UIDS[:2], plain_prefetch=1)
        await world.place(plain=True)
        other = await world.place(plain=True)
        late = world.workers[UIDS[0]]
        gate = asyncio.get_running_loop().create_future()
        late.answers.append(gate)  # its Accept has not come yet
        placing = asyncio.ensure_future(world.place(plain=True))
        await asyncio.wait_for(world.at_gate.get(), WAIT_S)
        (queued,) = late.calls[1:]
        end(other)  # UIDS[1] is idle: nothing it knows of is queued
        assert queued.state == SENT and not queued.recalled
        late._reply = lambda call, answer: Worker._reply(late, call, "queued")  # type: ignore[method-assign]
        gate.set_result(None)  # the Accept (queued) comes
        assert await placing is queued
        assert queued.recalled

    async def test_a_call_queued_behind_someone_elses_should_not_be_asked_back(self):
        """Test that a call queued on a worker running none of ours stays: asking it back could go round and round."""
        world = World(UIDS[:2], plain_prefetch=1)
        world.workers[UIDS[0]].answer = "queued"  # (busy with another pool's call)
        queued = await world.place(plain=True)
        assert queued in world.workers[UIDS[0]].calls
        world.path.queued(UIDS[0])  # UIDS[1] is idle, yet this call came in the idle pass
        assert not queued.recalled

    async def test_feed_idle_should_ask_back_one_queued_call_for_each_worker_that_joined(self):
        """Test that workers joining while calls wait in others' lines each get one asked back, no more."""
        world = World(UIDS[:2], plain_prefetch=1)
        await world.place(plain=True)
        await world.place(plain=True)
        for worker in world.workers.values():
            worker.answer = "queued"
        queued = [await world.place(plain=True) for _ in range(2)]
        world.path.feed_idle()
        assert not any(call.recalled for call in queued)  # no worker is idle
        for uid in UIDS[2:4]:
            world.add(uid)
        world.path.feed_idle()
        assert [call.recalled for call in queued] == [True, True]

    async def test_feed_idle_should_pass_over_refusing_or_full_workers_and_wait_for_the_line(self):
        """Test that a joined worker known full or refusing plain calls gets nothing, nor one while calls wait."""
        world = World(UIDS[:3], plain_prefetch=1)
        await world.place(plain=True)
        busy = await world.place(plain=True)
        world.workers[UIDS[0]].answer = "queued"
        world.roster.room.rejected(UIDS[2], world.roster.room.offer(UIDS[2]))  # known full
        queued = await world.place(plain=True)
        assert queued in world.workers[UIDS[0]].calls
        world.path.feed_idle()
        assert not queued.recalled  # UIDS[2], the one without a call of ours, is full
        world.roster.room.announced(UIDS[2])
        world.path.plain.refuse(UIDS[2])  # it turned a plain call away
        world.path.feed_idle()
        assert not queued.recalled  # refusing plain calls
        world.path.plain.refuse(None)
        world.path._line.append(object())  # type: ignore[arg-type]  # a call waits in the pool's line
        world.path.feed_idle()
        assert not queued.recalled  # the idle worker is fed from the line instead
        world.path._line.clear()
        world.path.feed_idle()
        assert queued.recalled and not busy.recalled  # (a started call is never asked back)

    async def test_a_plain_call_sent_from_the_line_and_turned_away_should_go_back_to_its_place(self):
        """Test the head of the line sending a plain call without waiting for its answer: the next goes at once;
        one turned away returns to its place, the worker that refused is passed over until capacity frees (was
        test_sends.TestAnswers and test_placement's send_plain test)."""
        world = World(UIDS[:2], plain_prefetch=0)
        a, b = world.workers[UIDS[0]], world.workers[UIDS[1]]
        a.answers.append("busy")  # refuses the first plain call it is sent
        b.answer = "full"
        first = world.start("first", plain=True)
        second = world.start("second", plain=True)
        await world.waiting(2)  # each was sent once (a refused, b full), and waits in its place
        assert world.offers == UIDS[:2] and world.path.plain.refusing == {UIDS[0]}
        assert world.roster.known_full == {UIDS[1]}
        world.room(UIDS[1], 2)  # b says "room": refusals are doubted too, and the line gets its turns
        calls = await asyncio.gather(first, second)
        assert [c.name for c in calls] == ["first", "second"]
        assert first.result() in a.calls and second.result() in b.calls  # first in line, first to the lowest uid

    async def test_an_outcome_that_overtook_its_accept_should_reach_the_caller(self):
        """Test that a worker's outcome arriving before (or instead of) its Accept counts as the Accept, and is read."""
        world = World()
        worker = world.workers[UIDS[0]]
        worker._reply = lambda call, answer: end(call)  # type: ignore[method-assign]
        assert await world.path.call(task()) is None

    async def test_a_plain_call_given_up_at_its_deadline_should_hand_a_worker_still_there_to_overdue(self):
        """Test that a worker whose plain call's caller gave up at the deadline is handed over after the grace."""
        world = World()
        late = task(plain=True)
        call = await asyncio.wait_for(world.path._place(late), WAIT_S)
        late.deadline = 0.0  # long past
        loop = asyncio.get_running_loop()
        ended_at = loop.time()
        call.cancel()  # its caller gave up
        await eventually(lambda: world.overdue == [UIDS[0]], timeout=WAIT_S)
        assert loop.time() - ended_at >= OVERDUE_GRACE_S * 0.9

    async def test_a_plain_call_that_ended_in_time_should_not_be_overdue(self):
        """Test that an ordinary end (not cancelled here, or before its deadline) hands nobody over."""
        world = World()
        in_time = task(plain=True)
        call = await asyncio.wait_for(world.path._place(in_time), WAIT_S)
        in_time.deadline = time.monotonic() + 3600
        call.cancel()
        await asyncio.sleep(OVERDUE_GRACE_S + 0.1)  # (bounded: when right, nothing is ever handed over)
        assert world.overdue == []


# -- tickets, limits and jobs (was test_path.TestCallPath) -------------------------------------------------------


class TestTickets:
    @pytest.mark.parametrize("state", ["new", "starting", "closed"])
    async def test_dispatch_should_raise_pool_closed_when_the_pool_is_not_open(self, state):
        """Test that a pool not open refuses calls, naming its state."""
        world = World()
        world.path.state = state
        with pytest.raises(pool.PoolClosed, match=f"a pool that is {state}"):
            await world.dispatch()
        with pytest.raises(pool.PoolClosed, match=f"a pool that is {state}"):
            await world.path.place_job(task())
        with pytest.raises(pool.PoolClosed, match=f"a pool that is {state}"):
            await world.path.call(task())

    async def test_dispatch_should_hold_the_calls_place_until_it_ends(self):
        """Test that an accepted call counts in flight and admitted until it ends, then frees its place."""
        world = World()
        call = await world.dispatch()
        assert (world.path.in_flight, world.path.admitted, world.freed) == (1, 1, 0)
        end(call)
        assert (world.path.in_flight, world.path.admitted, world.freed) == (0, 0, 1)

    async def test_call_should_hold_the_calls_place_until_its_outcome_and_return_it(self):
        """Test the whole call of a coroutine routine (`call`): placed, its outcome decoded, its place freed."""
        world = World()
        worker = world.workers[UIDS[0]]
        reply = worker._reply
        worker._reply = lambda call, answer: (reply(call, answer), end(call))  # type: ignore[method-assign, func-returns-value]
        assert await asyncio.wait_for(world.path.call(task()), WAIT_S) is None
        assert (world.path.in_flight, world.path.admitted, world.freed) == (0, 0, 1)

    async def test_dispatch_should_refuse_past_max_pending_and_admit_again_once_a_call_ends(self):
        """Test the ceiling: calls admitted at once, running or waiting, at most ``max_pending``."""
        world = World(max_pending=2)
        calls = [await world.dispatch() for _ in range(2)]
        with pytest.raises(pool.AdmissionRejected, match="max_pending=2"):
            await world.dispatch()
        end(calls[0])
        await world.dispatch()

    async def test_dispatch_should_release_its_place_and_raise_when_no_worker_accepts(self):
        """Test that a call no worker took leaves nothing held behind."""
        world = World()
        world.workers[UIDS[0]].answer = "busy"
        with pytest.raises(pool.NoWorkersAvailable):
            await world.dispatch()
        assert (world.path.in_flight, world.path.admitted, world.freed) == (0, 0, 1)

    async def test_dispatch_should_raise_capacity_timeout_when_its_queue_slot_never_frees(self):
        """Test that a call waiting on its queue's concurrency past its dispatch deadline times out, counted."""
        world = World()
        q = pool.Queue("db", concurrency=1)
        holder = await world.dispatch(queue=q)
        with pytest.raises(pool.CapacityTimeout, match=r"f\(\) waited 0.05s \(dispatch_deadline\) without starting"):
            await world.dispatch(queue=q, deadline=0.05)
        assert world.path.capacity_timeouts == 1
        assert world.path.admitted == 1  # only the holder
        end(holder)
        await world.dispatch(queue=q)  # the slot came back

    async def test_dispatch_should_raise_capacity_timeout_when_queued_for_a_worker_past_the_deadline(self):
        """Test that a call waiting in the line for a busy worker times out at its deadline."""
        world = World(queue_depth=4)
        world.workers[UIDS[0]].answer = "busy"
        with pytest.raises(
            pool.CapacityTimeout,
            match=r"waited 0.05s \(dispatch_deadline\) without starting: \d+ calls queued for 1 workers",
        ):
            await world.dispatch(deadline=0.05)
        assert (world.path.capacity_timeouts, world.path.admitted, world.path.waiting) == (1, 0, 0)

    async def test_place_job_should_return_none_when_its_limits_are_full_and_never_wait(self):
        """Test a job attempt: it takes a free slot or returns None at once (the store is its queue)."""
        world = World()
        q = pool.Queue("db", concurrency=1)
        job = task("job", queue=q)
        call = await asyncio.wait_for(world.path.place_job(job), WAIT_S)
        assert call is not None and job.prefetch == 0  # an attempt never waits inside a worker
        assert world.path.in_flight == 1
        assert await asyncio.wait_for(world.path.place_job(task("job", queue=q)), WAIT_S) is None
        end(call)
        assert world.path.in_flight == 0 and world.freed == 1
        assert await asyncio.wait_for(world.path.place_job(task("job", queue=q)), WAIT_S) is not None

    async def test_place_job_should_free_its_slot_when_no_worker_accepts(self):
        """Test that a job attempt no worker took gives its limit slot back."""
        world = World()
        q = pool.Queue("db", concurrency=1)
        world.workers[UIDS[0]].answers.append("busy")
        with pytest.raises(pool.NoWorkersAvailable):
            await world.path.place_job(task("job", queue=q))
        assert await asyncio.wait_for(world.path.place_job(task("job", queue=q)), WAIT_S) is not None

    async def test_a_caller_cancelled_before_the_first_answer_should_cancel_the_call_it_sent(self):
        """Test that a call on its way when its caller gives up is cancelled on the worker, never left running."""
        world = World()
        gate = asyncio.get_running_loop().create_future()
        world.workers[UIDS[0]].answers.append(gate)
        calling = asyncio.ensure_future(world.path.call(task()))
        await asyncio.wait_for(world.at_gate.get(), WAIT_S)
        calling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await calling
        (call,) = world.workers[UIDS[0]].calls
        assert call.cancelled_here and (call.id, pb.Step.CANCEL) in world.workers[UIDS[0]].stream.steps
        assert (world.path.in_flight, world.path.admitted) == (0, 0)
