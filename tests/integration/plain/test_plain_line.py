"""A busy worker's line of plain calls (``plain_prefetch``): queued calls, handbacks, and each call run exactly once.

Each call records its side effect (a line appended to a file) before anything else, so a call that
ran twice, or a call that ran after its worker's task limit, shows in the file.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal

import pytest

import pool
from balancer import PriorityLoadBalancer
from tests.integration.routines import plain_routines as plain
from tests.integration.support.gate import Gate
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration


async def _in_flight(p: pool.WorkerPool) -> list[int]:
    return sorted(s.in_flight for s in (await p.worker_states()).values())


def _ran(path: os.PathLike[str]) -> list[str]:
    with open(path) as f:
        return f.read().split()


async def test_a_busy_worker_should_hold_plain_calls_in_its_line_up_to_its_prefetch():
    """Test that a worker running a plain call accepts one more into its line; the next waits in the pool."""
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=1) as p:
        running = asyncio.ensure_future(plain.gate(gate.address, "running"))
        assert await gate.arrived() == "running"
        in_line = asyncio.ensure_future(plain.crc(b"in line"))
        in_pool = asyncio.ensure_future(plain.crc(b"in the pool"))
        await eventually(lambda: p.stats().waiting_for_worker == 1)
        assert await _in_flight(p) == [2]  # the running call and the one in its line
        gate.open()
        async with asyncio.timeout(30):
            await asyncio.gather(running, in_line, in_pool)


async def test_a_routine_with_prefetch_0_should_never_wait_inside_a_busy_worker():
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=2) as p:
        running = asyncio.ensure_future(plain.gate(gate.address, "running"))
        assert await gate.arrived() == "running"
        waiting = asyncio.ensure_future(plain.crc.options(prefetch=0)(b"never in line"))
        await eventually(lambda: p.stats().waiting_for_worker == 1)
        assert await _in_flight(p) == [1]
        gate.open()
        async with asyncio.timeout(30):
            await asyncio.gather(running, waiting)


async def test_a_call_in_a_busy_workers_line_should_move_to_a_worker_that_goes_idle():
    """Test the handback: a call queued behind a held call runs on the other worker once that one is idle.

    Without it the queued call would wait for the held one, which the test lets go only after it ran.
    """
    async with (
        Gate() as first,
        Gate() as second,
        pool.WorkerPool(spawn=2, plain_prefetch=1, loadbalancer=PriorityLoadBalancer()) as p,
    ):
        held = asyncio.ensure_future(plain.gate(first.address, "held"))  # the lowest-uid worker
        assert await first.arrived() == "held"
        other = asyncio.ensure_future(plain.gate(second.address, "other"))  # the idle one
        assert await second.arrived() == "other"
        queued = asyncio.ensure_future(plain.plain_pid())  # no worker idle: in the lowest-uid worker's line
        await eventually(lambda: _in_flight(p), timeout=30)
        await eventually(lambda: p.stats().waiting_for_worker == 0)
        assert await _in_flight(p) == [1, 2]
        second.open()
        async with asyncio.timeout(30):
            assert await queued == await other  # handed back, then run where "other" ran
        assert not held.done()
        first.open()
        async with asyncio.timeout(30):
            await held


async def test_calls_should_run_exactly_once_when_workers_recycle_with_calls_in_line(tmp_path):
    """Test that a worker starts exactly its task limit and hands back what waits in its line."""
    path = tmp_path / "ran"
    async with pool.WorkerPool(spawn=2, plain_prefetch=2, max_tasks_per_worker=3) as p:
        async with asyncio.timeout(120):
            pids = await asyncio.gather(*(plain.record(str(path), str(i)) for i in range(40)))
        assert p.stats().recycled.get("tasks", 0) >= 4
    assert sorted(_ran(path), key=int) == [str(i) for i in range(40)]  # each call ran exactly once
    assert max(collections.Counter(pids).values()) <= 3  # no worker ran past its limit (drawn in [3, 3.3])


async def test_calls_in_line_behind_a_timed_out_call_should_run_exactly_once_elsewhere(tmp_path):
    path = tmp_path / "ran"
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=2) as p:
        overdue = asyncio.ensure_future(plain.record_hang.options(timeout=3.0)(str(path), "overdue", gate.address))
        assert await gate.arrived() == "overdue"
        queued = [asyncio.ensure_future(plain.record(str(path), str(i))) for i in range(2)]
        await eventually(lambda: p.stats().waiting_for_worker == 0)
        async with asyncio.timeout(60):
            with pytest.raises(TimeoutError):
                await overdue
            await asyncio.gather(*queued)  # handed back as the worker left, run by its replacement
        assert p.stats().recycled.get("timeout") == 1
    assert sorted(_ran(path)) == ["0", "1", "overdue"]


async def test_calls_in_line_on_a_killed_worker_should_run_exactly_once_elsewhere(tmp_path):
    """Test that the pool reads a SIGKILLed worker's socket to its end: calls without a Started are placed again."""
    path = tmp_path / "ran"
    async with Gate() as gate, pool.WorkerPool(spawn=1, plain_prefetch=2) as p:
        running = asyncio.ensure_future(plain.record(str(path), "running", gate.address))
        assert await gate.arrived() == "running"
        queued = [asyncio.ensure_future(plain.record(str(path), str(i))) for i in range(2)]
        await eventually(lambda: p.stats().waiting_for_worker == 0)
        assert await _in_flight(p) == [3]
        os.kill(p.pids[0], signal.SIGKILL)
        async with asyncio.timeout(60):
            with pytest.raises(pool.WorkerBroken):
                await running  # it may have run: never again
            await asyncio.gather(*queued)  # they never started: run by the replacement
    assert sorted(_ran(path)) == ["0", "1", "running"]


async def test_calls_sent_with_one_that_kills_its_worker_at_once_should_run_exactly_once(tmp_path):
    """Test calls that reach a worker with one that ends it at once: each of them runs exactly once.

    The worker may die before its loop answered them: the pool, reading its socket to its end,
    finds neither an Accept to start nor a Started for them, and places them again (the race
    behind a CI failure: they used to fail with WorkerBroken). Rounds, as the race is not every time.
    """
    path = tmp_path / "ran"
    expected = []
    async with pool.WorkerPool(spawn=1, plain_prefetch=2) as p:
        for round_ in range(3):
            doomed = asyncio.ensure_future(plain.record_die(str(path), f"die.{round_}"))
            others = []
            for i in range(2):
                await asyncio.sleep(0)  # (each in a message of its own, as it dies)
                others.append(asyncio.ensure_future(plain.record(str(path), f"{round_}.{i}")))
            expected += [f"die.{round_}", f"{round_}.0", f"{round_}.1"]
            async with asyncio.timeout(60):
                with pytest.raises(pool.WorkerBroken):
                    await doomed
                await asyncio.gather(*others)
        assert len(p.pids) == 1
    assert sorted(_ran(path)) == sorted(expected)
