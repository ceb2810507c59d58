"""Plain ``def`` routines on real workers: values, one at a time per worker, cancellation, hard timeouts."""

from __future__ import annotations

import asyncio
import time
import zlib

import pytest

import pool
from backpressure import TaskCountBackpressure
from pool._call._calls import CANCEL_CONFIRM_S
from tests.integration.routines import common as routines
from tests.integration.routines import plain_routines as plain
from tests.integration.support.gate import Gate
from tests.integration.support.helpers import HANG_S, eventually

pytestmark = pytest.mark.integration


async def test_plain_routine_should_return_its_value_and_raise_its_own_exception():
    async with pool.WorkerPool(spawn=1):
        assert await plain.crc(b"abc", start=7) == zlib.crc32(b"abc", 7)
        with pytest.raises(LookupError, match="no such row") as info:
            await plain.fail("no such row")
        assert "plain_routines.py" in str(info.value.__cause__)  # the worker's traceback


async def test_plain_routine_should_run_in_a_worker_not_here():
    import os

    async with pool.WorkerPool(spawn=1):
        assert await plain.plain_pid() != os.getpid()


async def test_a_worker_should_run_one_plain_call_at_a_time_and_async_calls_beside_it():
    """Test that, without prefetch, a second plain call waits at the dispatcher (not in the worker) while async calls run."""
    async with (
        Gate() as gate,
        pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(8), plain_prefetch=0) as p,
    ):
        first = asyncio.ensure_future(plain.gate(gate.address, "first"))
        assert await gate.arrived() == "first"
        second = asyncio.ensure_future(plain.gate(gate.address, "second"))
        async with asyncio.timeout(30):
            assert await routines.add(1, 2) == 3  # async work still goes in beside the plain call
        state = next(iter((await p.worker_states()).values()))
        assert state.in_flight == 1  # the second plain call is not inside the worker
        assert p.stats().waiting_for_worker == 1
        gate.open()
        assert await gate.arrived() == "second"  # it started once the first left the thread
        gate.open()
        async with asyncio.timeout(30):
            assert await first == await second


async def test_plain_calls_should_spread_over_the_workers_and_all_finish():
    async with pool.WorkerPool(spawn=2):
        pids = await asyncio.gather(*(plain.burn(0.05) for _ in range(8)))
        assert len(set(pids)) == 2


async def test_a_worker_running_a_plain_call_should_answer_state_and_accept_promptly():
    """Test that the worker's loop stays free while a plain call holds its thread, by order, not by a clock.

    The plain call holds its thread until the test opens the gate: a worker whose loop waited for
    it would leave the State call unanswered (left out after HANG_S) and the Dispatch unaccepted
    (passed over after ACCEPT_TIMEOUT_S); a slow machine answers late but while the call still runs.
    """
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=0) as p:
        running = asyncio.ensure_future(plain.gate(gate.address))
        await gate.arrived()
        waiting = asyncio.ensure_future(plain.burn(2.0))  # waits at the dispatcher for the thread
        states = await p.worker_states(timeout=HANG_S)  # leaves out a worker that does not answer in time
        call = await asyncio.wait_for(p.dispatch(routines.add.task((1, 2), {})), HANG_S)  # once accepted
        assert [s.in_flight for s in states.values()] == [1]
        assert not running.done()  # both answered while the plain call still held the thread
        call.cancel()
        gate.open()
        await running
        waiting.cancel()


async def test_cancelling_a_running_plain_call_should_end_the_caller_and_drop_its_result():
    """Test that the caller ends at once; the function runs on (it cannot be stopped) and holds the thread."""
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=0) as p:
        running = asyncio.ensure_future(plain.gate(gate.address, "first"))
        await gate.arrived()
        running.cancel()
        async with asyncio.timeout(30):
            with pytest.raises(asyncio.CancelledError):
                await running
        after = asyncio.ensure_future(plain.gate(gate.address, "second"))
        await eventually(lambda: p.stats().waiting_for_worker == 1)  # it waits for the thread, still taken
        gate.open()
        assert await gate.arrived() == "second"
        gate.open()
        async with asyncio.timeout(30):
            assert await after


async def test_a_plain_call_past_its_timeout_should_raise_and_only_its_worker_should_be_replaced():
    async with Gate() as gate, pool.WorkerPool(spawn=2, backpressure=TaskCountBackpressure(4)) as p:
        before = set(p.workers)
        async with asyncio.timeout(60):
            overdue = asyncio.ensure_future(plain.hang.options(timeout=1.0)(gate.address))
            assert await gate.arrived() == "hanging"
            with pytest.raises(TimeoutError):
                await overdue
            await p.wait_for_workers(2, timeout=30)  # the overdue worker exits and is replaced
            while set(p.workers) & before == before:
                await asyncio.sleep(0.01)  # (the roster changes as the worker leaves; bounded above)
            await p.wait_for_workers(2, timeout=30)
        assert len(set(p.workers) & before) == 1  # the other worker is untouched
        assert await plain.crc(b"") == 0


async def test_other_calls_on_a_timed_out_worker_should_end_in_worker_broken():
    async with Gate() as gate, pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(4)):
        async with asyncio.timeout(60):
            overdue = asyncio.ensure_future(plain.hang.options(timeout=1.0)(gate.address))
            assert await gate.arrived() == "hanging"
            beside = asyncio.ensure_future(routines.sleep(30))
            with pytest.raises(TimeoutError):
                await overdue
            with pytest.raises(pool.WorkerBroken):
                await beside


async def test_a_plain_routine_should_run_as_a_job(tmp_path):
    async with pool.WorkerPool(spawn=1, store=f"sqlite:///{tmp_path}/jobs.db"):
        job = await plain.crc.submit(b"abc")
        async with asyncio.timeout(30):
            assert await job.result() == zlib.crc32(b"abc")


async def test_a_plain_job_attempt_past_its_timeout_should_fail_with_timeout_error(tmp_path):
    async with Gate() as gate, pool.WorkerPool(spawn=1, store=f"sqlite:///{tmp_path}/jobs.db"):
        job = await plain.hang.options(timeout=1.0).submit(gate.address)
        assert await gate.arrived() == "hanging"
        async with asyncio.timeout(60):
            with pytest.raises(TimeoutError):
                await job.result()
        await job.refresh()
        assert job.state == "failed"


async def test_a_plain_call_holding_the_gil_past_its_timeout_should_have_its_worker_killed_by_the_pool():
    """Test that a worker that cannot run its own deadline (C code holding the GIL) is killed and replaced.

    Its caller is not kept waiting for a confirmation the worker cannot send: it ends within
    `PLAIN_ABORT_S` of the deadline, well before `CANCEL_CONFIRM_S` (it waited that long before issue 42).
    """
    async with Gate() as gate, pool.WorkerPool(spawn=1) as p:
        before = set(p.workers)
        async with asyncio.timeout(60):
            started = time.monotonic()
            overdue = asyncio.ensure_future(plain.backtrack.options(timeout=1.0)(gate.address))
            assert await gate.arrived() == "backtracking"
            with pytest.raises(TimeoutError):
                await overdue
            assert time.monotonic() - started < 1.0 + CANCEL_CONFIRM_S  # tied to the mechanism it replaced
            while set(p.workers) & before:
                await asyncio.sleep(0.01)  # the pool kills it OVERDUE_GRACE_S after the deadline (bounded above)
            await p.wait_for_workers(1, timeout=30)
            assert await plain.crc(b"") == 0
        assert p.stats().recycled.get("timeout") == 1
