"""Tests for pool._worker._lifecycle: when a worker stops (idle, lifetime, recycling) and how it drains.

A real `WorkerAdmission`, a real `TaskOwner` and short timers on a real loop; the service's parts it calls
(cancel the calls, end the streams) are recorded. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pool._base._tasks import TaskOwner
from pool._worker._admission import WorkerAdmission
from pool._worker._lifecycle import Lifecycle
from pool._worker._recycle import Recycler

WAIT_S = 5.0
QUICK_S = 0.05
"""An idle timeout or a grace short enough that a test waits for it."""
QUIET_S = 0.3
"""How long a test watches for something that must not happen (bounded: when right, it never happens)."""


class Worker:
    """A lifecycle with what it drives recorded: ``events`` in order, calls counted in its admission."""

    def __init__(self, *, idle_timeout: float = 0.0, max_lifetime: float = 0.0) -> None:
        self.events: list[str] = []
        self.admission = WorkerAdmission(None)
        self.tasks = TaskOwner("test worker", logging.getLogger("test"))
        self.lifecycle = Lifecycle(
            self.admission,
            self.tasks,
            idle_timeout=idle_timeout,
            max_lifetime=max_lifetime,
            cancel_all=self.cancel_all,
            end_streams=self.end_streams,
        )
        self.on_cancel = self.end_call
        self.draining = asyncio.Event()
        self.lifecycle.on_drain(self.draining.set)

    def start_call(self) -> None:
        if self.admission.admit():
            self.lifecycle.busy()

    def end_call(self) -> None:
        self.admission.release()
        if self.admission.in_flight == 0:
            self.lifecycle.idle()

    def cancel_all(self) -> None:
        self.events.append("cancel_all")
        while self.admission.in_flight:
            self.on_cancel()

    async def end_streams(self) -> None:
        self.events.append("end_streams")

    async def done(self) -> None:
        await asyncio.wait_for(self.lifecycle.done.wait(), WAIT_S)

    async def still_serving(self) -> bool:
        """Whether the worker is still accepting after `QUIET_S` (no drain began meanwhile)."""
        return await _quiet(self.draining) and self.admission.accepting

    async def not_done(self) -> bool:
        """Whether the worker is not done after `QUIET_S` (a drain may run)."""
        return await _quiet(self.lifecycle.done)

    async def close(self) -> None:
        self.lifecycle.stop()
        await self.tasks.aclose()


class TestLifecycle:
    async def test_idle_timeout_should_retire_a_worker_idle_that_long(self):
        """Test that an idle worker drains on its own after --idle-timeout: not accepting, streams ended, done."""
        worker = Worker(idle_timeout=QUICK_S)
        worker.lifecycle.start()
        await worker.done()
        assert worker.lifecycle.exit_reason == "idle for --idle-timeout 0.05s"
        assert not worker.admission.accepting
        assert worker.events == ["end_streams"]
        await worker.close()

    async def test_busy_should_disarm_the_idle_timer_until_the_last_call_ends(self):
        """Test that a worker with a call running never retires for idleness, and the clock restarts when it ends."""
        worker = Worker(idle_timeout=QUICK_S)
        worker.lifecycle.start()
        worker.start_call()
        assert await worker.still_serving()
        before = worker.lifecycle.idle_since
        worker.end_call()
        assert worker.lifecycle.idle_since > before
        await worker.done()
        assert worker.lifecycle.exit_reason.startswith("idle")
        await worker.close()

    async def test_max_lifetime_should_retire_without_a_grace_and_wait_for_calls_in_flight(self):
        """Test that a worker at --max-lifetime stops accepting at once but lets its running call finish, however long."""
        worker = Worker(max_lifetime=QUICK_S)
        worker.start_call()
        worker.lifecycle.start()
        await asyncio.wait_for(worker.draining.wait(), WAIT_S)
        assert not worker.admission.accepting
        assert worker.lifecycle.exit_reason == "reached --max-lifetime 0.05s"
        assert await worker.not_done()  # no grace: the call is not cancelled
        worker.end_call()
        await worker.done()
        assert worker.events == ["end_streams"]
        await worker.close()

    async def test_drain_should_stop_accepting_at_once_and_run_drain_callbacks_despite_one_failing(self, caplog):
        """Test that drain turns calls away before its task runs, and every callback runs though one raises."""
        worker = Worker()
        ran: list[str] = []
        worker.lifecycle.on_drain(lambda: ran.append("first"))
        worker.lifecycle.on_drain(lambda: 1 / 0)
        worker.lifecycle.on_drain(lambda: ran.append("third"))
        with caplog.at_level(logging.ERROR, logger="leakypool.worker"):
            drained = worker.lifecycle.drain("SIGTERM", 10.0)
            assert not worker.admission.accepting  # before the drain task ran
            await asyncio.wait_for(drained, WAIT_S)
        assert ran == ["first", "third"]
        assert "drain callback failed" in caplog.text
        assert worker.lifecycle.done.is_set() and worker.lifecycle.exit_reason == "SIGTERM"
        await worker.close()

    async def test_drain_should_cancel_calls_still_running_when_the_grace_ends(self):
        """Test that calls outliving the grace are cancelled, then the streams end."""
        worker = Worker()
        worker.start_call()
        worker.start_call()
        worker.lifecycle.drain("Stop", QUICK_S)
        await worker.done()
        assert worker.events == ["cancel_all", "end_streams"]
        assert worker.admission.in_flight == 0
        await worker.close()

    async def test_drain_should_not_cancel_when_calls_end_within_the_grace(self):
        """Test that a call ending within the grace is not cancelled."""
        worker = Worker()
        worker.start_call()
        worker.lifecycle.drain("Stop", WAIT_S)
        assert await worker.not_done()
        worker.end_call()
        await worker.done()
        assert worker.events == ["end_streams"]
        await worker.close()

    async def test_drain_again_should_let_a_shorter_grace_take_over_and_keep_the_first_reason(self):
        """Test that SIGTERM bounds a worker already retiring without limit (idle, max lifetime)."""
        worker = Worker()
        worker.start_call()
        first = worker.lifecycle.drain("retiring", None)
        assert await worker.not_done()
        assert worker.lifecycle.drain("SIGTERM", QUICK_S) is first
        await worker.done()
        assert worker.events == ["cancel_all", "end_streams"]
        assert worker.lifecycle.exit_reason == "retiring"
        await worker.close()

    async def test_drain_again_should_keep_the_shorter_grace_when_a_longer_one_comes(self):
        """Test that a later, longer grace does not extend the first."""
        worker = Worker()
        worker.start_call()
        worker.lifecycle.drain("SIGTERM", QUICK_S)
        worker.lifecycle.drain("Stop", 60.0)
        await worker.done()
        assert worker.events == ["cancel_all", "end_streams"]
        await worker.close()

    async def test_drain_should_await_the_handoff_before_ending_streams_when_recycled(self):
        """Test that a recycling worker ends its streams only once the pool took its last call (no call cut off)."""
        worker = Worker()

        async def handoff() -> None:
            worker.events.append("handoff")

        worker.lifecycle.handoff = handoff
        worker.lifecycle.drain("Stop", 1.0)  # not recycled: no handoff
        await worker.done()
        assert worker.events == ["end_streams"]
        await worker.close()

        worker = Worker()
        worker.lifecycle.handoff = handoff
        worker.lifecycle.retired("timeout")
        assert worker.lifecycle.recycled == "timeout"
        worker.lifecycle.drain("a plain call ran past its timeout", 0.0)
        await worker.done()
        assert worker.events == ["handoff", "end_streams"]
        await worker.close()

    async def test_counted_should_retire_once_the_last_call_of_the_task_limit_started(self):
        """Test the task limit: take() lets exactly the limit start, counted() then retires without a grace."""
        worker = Worker()
        assert worker.lifecycle.take()  # no recycler: always
        worker.lifecycle.recycler = Recycler(2, 0)
        assert worker.lifecycle.take()
        worker.lifecycle.counted()
        assert worker.admission.accepting
        assert worker.lifecycle.take()
        assert not worker.lifecycle.take()
        worker.lifecycle.counted()
        assert not worker.admission.accepting
        assert worker.lifecycle.recycled == "tasks"
        assert "2 calls" in worker.lifecycle.exit_reason
        await worker.done()
        await worker.close()

    async def test_ended_should_retire_when_memory_grew_past_the_limit(self):
        """Test the memory limit, read as each call ends."""
        rss = [100 * 2**20]
        worker = Worker()
        worker.lifecycle.recycler = recycler = Recycler(0, 2**20, rss=lambda: rss[0])
        recycler.ready()
        worker.lifecycle.ended()
        assert worker.admission.accepting
        rss[0] += 2 * 2**20
        worker.lifecycle.ended()
        assert not worker.admission.accepting and worker.lifecycle.recycled == "memory"
        await worker.done()
        await worker.close()

    async def test_a_call_that_ends_while_the_idle_timer_runs_should_get_the_whole_timeout_after_it(self):
        """Test the one idle timer many calls share: a call started and ended after the timer was armed does not
        cancel it, yet the worker retires only a whole --idle-timeout after that call ended (the timer, firing
        early for it, is armed again for what is left), never before."""
        worker = Worker(idle_timeout=QUIET_S)
        worker.lifecycle.start()
        await asyncio.sleep(QUIET_S / 2)  # (time passing is what is tested: the timer armed at start is half run)
        worker.start_call()
        worker.end_call()
        ended = time.monotonic()
        await worker.done()
        assert time.monotonic() - ended >= QUIET_S * 0.99  # (timers never fire early; the loop's clock may round)
        assert worker.lifecycle.exit_reason.startswith("idle")
        await worker.close()

    async def test_restart_idle_clock_should_count_idleness_from_now(self):
        """Test that a worker discoverable only now gets its whole idle timeout from now, not from its start."""
        worker = Worker(idle_timeout=0.3)
        worker.lifecycle.start()
        started = worker.lifecycle.idle_since
        await asyncio.sleep(0.1)  # (some of the timeout spent before it is discoverable: 0.2s to spare under load)
        worker.lifecycle.restart_idle_clock()
        restarted = worker.lifecycle.idle_since
        assert restarted > started
        await worker.done()
        assert time.monotonic() - restarted >= 0.29  # a whole timeout from the restart, not 0.2s
        await worker.close()

    async def test_restart_idle_clock_should_do_nothing_when_a_call_runs(self):
        """Test that restarting the clock of a busy worker arms no idle timer."""
        worker = Worker(idle_timeout=QUICK_S)
        worker.lifecycle.start()
        worker.start_call()
        worker.lifecycle.restart_idle_clock()
        assert await worker.still_serving()
        worker.end_call()
        await worker.done()
        await worker.close()

    async def test_stop_should_disarm_the_timers(self):
        """Test that a worker exiting for another reason is not retired by its timers afterwards."""
        worker = Worker(idle_timeout=QUICK_S, max_lifetime=QUICK_S)
        worker.lifecycle.start()
        worker.lifecycle.stop()
        assert await worker.still_serving()
        assert worker.admission.accepting
        await worker.close()


async def _quiet(event: asyncio.Event) -> bool:
    """Whether ``event`` stays unset for `QUIET_S`."""
    try:
        await asyncio.wait_for(asyncio.shield(event.wait()), QUIET_S)
    except TimeoutError:
        return True
    return False
