"""Backpressure on real workers: the hook runs before acknowledging, and a no is transient."""

from __future__ import annotations

import asyncio

import pytest

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines
from tests.integration.routines import hooks
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_rejected_task_should_never_start(one_slot_pool):
    async with Signals() as signals, one_slot_pool(1):
        first = asyncio.ensure_future(routines.sleep(60, signals.address, "first"))
        await signals.wait("started first")
        with pytest.raises(pool.NoWorkersAvailable) as info:
            await routines.sleep(0, signals.address, "second")
        assert info.value.__cause__.code == "RESOURCE_EXHAUSTED"
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)  # returns once the worker confirmed the cancel
        assert signals.count("started second") == 0
        assert await routines.add(1, 1) == 2  # room again once the first is gone


async def test_threshold_should_cap_concurrent_tasks_per_worker():
    async with Signals() as signals, pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(3)) as p:
        running = [asyncio.ensure_future(routines.sleep(60, signals.address, f"t{i}")) for i in range(3)]
        for i in range(3):
            await signals.wait(f"started t{i}")
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.add(1, 2)
        (state,) = (await p.worker_states()).values()
        assert (state.in_flight, state.capacity) == (3, 3)
        for call in running:
            call.cancel()
        await asyncio.gather(*running, return_exceptions=True)


async def test_custom_hook_should_be_shipped_to_spawned_workers():
    async with pool.WorkerPool(spawn=2, backpressure=hooks.RejectNamed("add")):
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.add(1, 2)
        assert await routines.echo("accepted") == "accepted"


async def test_async_hook_should_be_awaited():
    async with Signals() as signals, pool.WorkerPool(spawn=1, backpressure=hooks.AsyncCap(1)):
        first = asyncio.ensure_future(routines.sleep(60, signals.address, "held"))
        await signals.wait("started held")
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.add(1, 2)
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        assert await routines.add(1, 2) == 3


async def test_raising_hook_should_reject_transiently_log_and_keep_serving(capfd):
    async with pool.WorkerPool(spawn=1, backpressure=hooks.Exploding()) as p:
        before = p.pids
        with pytest.raises(pool.NoWorkersAvailable) as info:
            await routines.fail("x")
        assert isinstance(info.value.__cause__, pool.WorkerRejected)
        assert info.value.__cause__.code == "UNAVAILABLE"
        assert "backpressure hook failed" in str(info.value.__cause__)
        assert await routines.add(2, 3) == 5
        assert p.pids == before and len(p.workers) == 1  # kept, not evicted
    err = capfd.readouterr().err
    assert "backpressure hook" in err and "RuntimeError: hook bug" in err


async def test_rejection_should_rotate_to_a_worker_with_room(one_slot_pool):
    async with Signals() as signals, one_slot_pool(2):
        first = asyncio.ensure_future(routines.sleep(60, signals.address, "a"))
        busy_pid = int((await signals.wait("started a")).split()[-1])
        for _ in range(10):
            assert await routines.pid() != busy_pid
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)


async def test_async_hook_should_count_calls_it_is_still_deciding_on():
    async with pool.WorkerPool(spawn=1, backpressure=hooks.AsyncCap(1)):
        results = await asyncio.gather(routines.sleep(0.3), routines.sleep(0.3), return_exceptions=True)
    assert sorted(type(r).__name__ for r in results) == ["NoWorkersAvailable", "float"]
