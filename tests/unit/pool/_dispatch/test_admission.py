"""Tests for pool._dispatch._admission: the ceiling, the queue's order, the lobby, and each way a waiting call ends.

A real `Admission` and `TaskOwner`; its `Placement` is a fake with ``free`` places (an offer takes one or
raises NoWorkersAvailable). Calls here are not plain (plain calls go through `Sends`: test_sends.py). The
whole path with real workers is in tests/integration/dispatch/test_admission.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._base._tasks import TaskOwner
from pool._call._task import Task
from pool._dispatch._admission import Admission, DeadlinePassed
from pool._errors import AdmissionRejected, NoWorkersAvailable, PoolClosed
from tests.integration.support.helpers import eventually

WAIT_S = 5.0


class Call:
    def __init__(self, name: str) -> None:
        self.name = name
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Workers:
    """A placement over ``free`` places: an offer takes one, or finds none (NoWorkersAvailable).

    ``gates``: an offer of that task waits for the future first; ``faults``: an offer of that task raises it.
    """

    def __init__(self, free: int = 0) -> None:
        self.free = free
        self.placed: list[str] = []
        self.gates: dict[str, asyncio.Future[None]] = {}
        self.at_gate: asyncio.Queue[str] = asyncio.Queue()
        self.faults: dict[str, BaseException] = {}
        self.doubted = 0

    async def place(self, task: Task) -> Call:
        gate = self.gates.pop(task.name, None)
        if gate is not None:
            self.at_gate.put_nowait(task.name)
            await gate
        if task.name in self.faults:
            raise self.faults.pop(task.name)
        if self.free <= 0:
            raise NoWorkersAvailable(f"no worker has room for {task.name}()")
        self.free -= 1
        self.placed.append(task.name)
        return Call(task.name)

    def may_take(self, task: Task) -> bool:
        return True

    def doubt_refusals(self) -> None:
        self.doubted += 1

    def doubt(self) -> None:
        pass

    def send_plain(self, task: Task) -> Any:
        raise AssertionError("no plain call here")


class Gate:
    """One Admission over `Workers`, with its starved and stranded hooks under the test's control."""

    def __init__(
        self, workers: Workers, *, queue_depth: int, admission_timeout: float = 0.0, max_pending: int | None = None
    ) -> None:
        self.workers = workers
        self.tasks = TaskOwner("test pool", logging.getLogger("test"))
        self.starved = 0
        self.coming = False
        self.stranded: BaseException | None = None
        self.admission = Admission(
            workers,  # type: ignore[arg-type]
            self.tasks,
            self._starve,
            queue_depth=queue_depth,
            admission_timeout=admission_timeout,
            max_pending=max_pending,
            coming=lambda: self.coming,
            stranded=lambda: self.stranded,
        )

    def _starve(self) -> None:
        self.starved += 1

    async def call(self, name: str, *, priority: int = 0, deadline: float = WAIT_S) -> Call:
        """Admit and dispatch one call, as the call path does (its place released at the end)."""
        ticket = self.admission.admit(Task(name, False, b"digest", b"", b"", priority=priority), None)
        try:
            return await self.admission.dispatch(ticket, asyncio.get_running_loop().time() + deadline)
        finally:
            self.admission.release(ticket)

    def start(self, name: str, **kwargs: Any) -> asyncio.Task[Call]:
        return asyncio.ensure_future(asyncio.wait_for(self.call(name, **kwargs), WAIT_S))

    async def queued(self, count: int) -> None:
        await eventually(lambda: self.admission.waiting == count, timeout=WAIT_S, interval=0.001)

    def freed(self, places: int) -> None:
        """Places freed on the workers, and the capacity event the pool sends then."""
        self.workers.free += places
        self.admission.capacity_changed()


@asynccontextmanager
async def gate(workers: Workers | None = None, **kwargs: Any) -> AsyncIterator[Gate]:
    opened = Gate(workers or Workers(), **kwargs)
    try:
        yield opened
    finally:
        opened.admission.close(PoolClosed("the test's pool closed"))
        await opened.tasks.aclose()


def task(name: str = "f") -> Task:
    return Task(name, False, b"digest", b"", b"")


class TestCeiling:
    def test_admit_should_refuse_with_a_retry_hint_when_max_pending_calls_are_admitted(self):
        """Test the fast gate: past max_pending admitted calls a call is refused at once, counted, and a call
        that ends lets the next one in."""
        admission = Admission(Workers(), None, lambda: None, queue_depth=0, admission_timeout=0, max_pending=2)  # type: ignore[arg-type]
        first, _ = admission.admit(task(), None), admission.admit(task(), None)
        with pytest.raises(
            AdmissionRejected, match=r"f\(\) refused: 2 calls already admitted \(max_pending=2\)"
        ) as caught:
            admission.admit(task(), None)
        assert caught.value.retry_after == admission.retry_after() and admission.rejected == 1
        admission.release(first)
        assert admission.admit(task(), None).task.name == "f" and admission.admitted == 2

    def test_admit_should_number_calls_in_arrival_order_without_a_ceiling(self):
        """Test that with no max_pending every call is admitted, each a later place in the arrival order."""
        admission = Admission(Workers(), None, lambda: None, queue_depth=0, admission_timeout=0, max_pending=None)  # type: ignore[arg-type]
        seqs = [admission.admit(task(), None).seq for _ in range(100)]
        assert seqs == sorted(seqs) and len(set(seqs)) == 100 and admission.rejected == 0

    def test_admit_should_give_a_call_handed_back_its_old_place_in_the_arrival_order(self):
        """Test that a task admitted again (a plain call handed back unstarted) keeps its place: it is not last."""
        admission = Admission(Workers(), None, lambda: None, queue_depth=0, admission_timeout=0, max_pending=None)  # type: ignore[arg-type]
        handed_back = task()
        first = admission.admit(handed_back, None)
        later = [admission.admit(task(), None).seq for _ in range(3)]
        admission.release(first)
        again = admission.admit(handed_back, None)
        assert again.seq == first.seq < min(later)

    def test_release_should_move_the_mean_duration_a_tenth_of_the_way_to_the_calls_duration(self):
        """Test the running mean behind retry_after: the newest call weighs DURATION_HALF_LIFE."""
        admission = Admission(Workers(), None, lambda: None, queue_depth=0, admission_timeout=0, max_pending=None)  # type: ignore[arg-type]
        ticket = admission.admit(task(), None)
        ticket.admitted_at = time.monotonic() - 11.0  # an 11 s call
        admission.release(ticket)
        assert admission.mean_duration == pytest.approx(2.0, abs=0.01) and admission.admitted == 0

    @given(durations=st.lists(st.floats(0, 1e6), max_size=20), running=st.integers(0, 1000))
    def test_retry_after_should_stay_between_50_ms_and_a_minute(self, durations, running):
        """Test that the hint a refused caller gets is never 0 (a hot retry loop) nor longer than a minute."""
        admission = Admission(Workers(), None, lambda: None, queue_depth=0, admission_timeout=0, max_pending=None)  # type: ignore[arg-type]
        now = time.monotonic()
        for duration in durations:
            ticket = admission.admit(task(), None)
            ticket.admitted_at = now - duration
            admission.release(ticket)
        for _ in range(running):
            admission.admit(task(), None)
        assert 0.05 <= admission.retry_after() <= 60.0


class TestNoQueue:
    async def test_dispatch_should_place_at_once_when_a_worker_has_room(self):
        """Test that a call a worker takes never waits: nothing queued, no pump started."""
        async with gate(Workers(free=1), queue_depth=4) as g:
            call = await asyncio.wait_for(g.call("f"), WAIT_S)
            assert (call.name, g.admission.waiting, len(g.tasks), g.starved) == ("f", 0, 0, 0)

    async def test_dispatch_should_raise_no_workers_available_and_ask_for_workers_when_there_is_no_queue(self):
        """Test fail fast: without a queue a call no worker took fails at once, and the pool is told to grow."""
        async with gate(queue_depth=0) as g:
            with pytest.raises(NoWorkersAvailable, match=r"no worker has room for f\(\)"):
                await asyncio.wait_for(g.call("f"), WAIT_S)
            assert (g.starved, g.admission.waiting, g.admission.admitted) == (1, 0, 0)

    async def test_dispatch_should_raise_what_stranded_says_when_no_worker_can_start(self):
        """Test that with a queue, a call that finds no worker while none can start ends with that reason, unqueued."""
        async with gate(queue_depth=4) as g:
            g.stranded = RuntimeError("the worker initializer failed")
            with pytest.raises(RuntimeError, match="initializer failed"):
                await asyncio.wait_for(g.call("f"), WAIT_S)
            assert g.admission.waiting == 0

    async def test_dispatch_should_wait_for_a_worker_on_its_way_when_there_is_no_queue(self):
        """Test that a recycle never fails a call: without a queue a call waits for a worker that is coming."""
        async with gate(queue_depth=0) as g:
            g.coming = True
            waiting = g.start("f")
            await g.queued(1)
            g.freed(1)
            assert (await waiting).name == "f"

    async def test_dispatch_should_end_with_no_workers_available_when_the_coming_worker_did_not_come(self):
        """Test that a call waiting (without a queue) for a worker that then does not come ends, not hangs."""
        async with gate(queue_depth=0) as g:
            g.coming = True
            waiting = g.start("f")
            await g.queued(1)
            g.coming = False
            g.admission.capacity_changed()
            with pytest.raises(NoWorkersAvailable, match="the worker it waited for did not come"):
                await waiting
            assert g.admission.waiting == 0


class TestQueue:
    async def test_dispatch_should_start_queued_calls_in_arrival_order_as_capacity_frees(self):
        """Test FIFO: a burst that found no worker starts in the order it arrived, one per freed place."""
        async with gate(queue_depth=10) as g:
            calls = [g.start(name) for name in "abcd"]
            await g.queued(4)
            for places in (1, 2, 1):
                g.freed(places)
                await eventually(lambda: g.workers.free == 0, timeout=WAIT_S, interval=0.001)
            assert [c.name for c in await asyncio.gather(*calls)] == list("abcd")
            assert g.workers.placed == list("abcd") and g.workers.doubted == 3

    async def test_dispatch_should_wait_without_a_timer_when_its_deadline_is_years_away(self):
        """Test that a call with no real bound (pool.Executor's) queues and is served like any other, and that a
        bounded one still has its deadline armed beside it."""
        async with gate(queue_depth=10) as g:
            unbounded = g.start("executor", deadline=10 * 365 * 24 * 3600.0)
            bounded = g.start("bounded", deadline=0.05)
            await g.queued(2)
            with pytest.raises(DeadlinePassed):
                await bounded
            g.freed(1)
            assert (await unbounded).name == "executor"

    async def test_dispatch_should_start_a_higher_priority_call_first_when_it_arrives_later(self):
        """Test that the queue is ordered by priority, then arrival."""
        async with gate(queue_depth=10) as g:
            calls = [g.start("low1"), g.start("low2"), g.start("high", priority=5), g.start("mid", priority=1)]
            await g.queued(4)
            g.freed(4)
            await asyncio.gather(*calls)
            assert g.workers.placed == ["high", "mid", "low1", "low2"]

    async def test_dispatch_should_queue_in_admission_order_when_rejections_come_back_out_of_order(self):
        """Test that two calls refused at the same moment queue in the order they were admitted, not the order
        their refusals came back in."""
        loop = asyncio.get_running_loop()
        workers = Workers()
        gate_a, gate_b = loop.create_future(), loop.create_future()
        workers.gates = {"a": gate_a, "b": gate_b}
        async with gate(workers, queue_depth=10) as g:
            a = g.start("a")
            assert await asyncio.wait_for(workers.at_gate.get(), WAIT_S) == "a"
            b = g.start("b")  # the queue is still empty: it is offered at once too
            assert await asyncio.wait_for(workers.at_gate.get(), WAIT_S) == "b"
            gate_b.set_result(None)  # b's refusal comes back first...
            await g.queued(1)
            gate_a.set_result(None)  # ...a's after it
            await g.queued(2)
            g.freed(2)
            await asyncio.gather(a, b)
            assert workers.placed == ["a", "b"]

    async def test_dispatch_should_refuse_at_once_when_the_queue_is_full_and_there_is_no_admission_timeout(self):
        """Test that a full queue with admission_timeout 0 refuses the next call, counted, with a hint."""
        async with gate(queue_depth=1) as g:
            first = g.start("a")
            await g.queued(1)
            with pytest.raises(AdmissionRejected, match=r"b\(\) refused: the queue is full \(1 waiting\)"):
                await asyncio.wait_for(g.call("b"), WAIT_S)
            assert (g.admission.rejected, g.admission.waiting) == (1, 1)
            g.freed(1)
            await first

    async def test_dispatch_should_move_from_the_lobby_into_the_queue_when_a_place_frees(self):
        """Test that a call waiting for a place in a full queue takes the place a leaving call frees."""
        async with gate(queue_depth=1, admission_timeout=WAIT_S) as g:
            leaving = g.start("a")
            await g.queued(1)
            lobby = g.start("b")
            await g.queued(2)
            leaving.cancel()
            await g.queued(1)
            g.freed(1)
            assert (await lobby).name == "b" and g.workers.placed == ["b"]

    async def test_dispatch_should_refuse_when_the_queue_stays_full_for_the_admission_timeout(self):
        """Test that a call waits at most admission_timeout for a place in the queue, then is refused."""
        async with gate(queue_depth=1, admission_timeout=0.05) as g:
            first = g.start("a")
            await g.queued(1)
            with pytest.raises(AdmissionRejected, match=r"the queue stayed full \(1 waiting\) for 0.05s"):
                await asyncio.wait_for(g.call("b"), WAIT_S)
            assert (g.admission.rejected, g.admission.waiting) == (1, 1)
            g.freed(1)
            await first


class TestWaitingEnds:
    async def test_dispatch_should_raise_deadline_passed_and_leave_the_queue_when_its_deadline_passes(self):
        """Test that a queued call's dispatch deadline ends its wait and frees its place."""
        async with gate(queue_depth=4) as g:
            with pytest.raises(DeadlinePassed):
                await asyncio.wait_for(g.call("f", deadline=0.05), WAIT_S)
            assert (g.admission.waiting, g.admission.admitted) == (0, 0)

    async def test_dispatch_should_leave_the_queue_when_its_caller_gives_up(self):
        """Test that a cancelled waiter frees its place at once and is never placed."""
        async with gate(queue_depth=4) as g:
            gone, kept = g.start("a"), g.start("b")
            await g.queued(2)
            gone.cancel()
            await g.queued(1)
            g.freed(1)
            assert (await kept).name == "b" and g.workers.placed == ["b"]

    async def test_dispatch_should_hand_a_placement_fault_to_its_caller_and_serve_the_next(self):
        """Test that an unexpected placement error ends only the call it happened to."""
        async with gate(queue_depth=4) as g:
            broken, kept = g.start("a"), g.start("b")
            await g.queued(2)
            g.workers.faults["a"] = RuntimeError("a bug in a balancer")
            g.freed(1)
            with pytest.raises(RuntimeError, match="a bug in a balancer"):
                await broken
            assert (await kept).name == "b"

    async def test_dispatch_should_end_with_what_stranded_says_when_no_worker_can_come_while_it_waits(self):
        """Test that queued calls end at once, with the reason, when the last worker is gone for good."""
        async with gate(queue_depth=4) as g:
            calls = [g.start("a"), g.start("b")]
            await g.queued(2)
            g.stranded = RuntimeError("the worker initializer failed")
            g.admission.capacity_changed()
            for call in calls:
                with pytest.raises(RuntimeError, match="initializer failed"):
                    await call
            assert g.admission.waiting == 0

    async def test_close_should_fail_every_waiting_call_with_the_pools_error_and_refuse_new_ones(self):
        """Test that closing the pool ends queued and lobby calls with its PoolClosed, and dispatch refuses after."""
        async with gate(queue_depth=1, admission_timeout=WAIT_S) as g:
            calls = [g.start("a"), g.start("b")]
            await g.queued(2)
            error = PoolClosed("the pool closed")
            g.admission.close(error)
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert results == [error, error] and g.admission.waiting == 0
            with pytest.raises(PoolClosed, match=r"f\(\) was dispatched through a pool that is closed"):
                await asyncio.wait_for(g.call("f"), WAIT_S)
