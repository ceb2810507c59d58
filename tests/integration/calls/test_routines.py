"""Routine calls behave as if local: values, streams, exceptions, cancellation, timeouts."""

from __future__ import annotations

import asyncio
import traceback

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_call_should_return_the_value_when_routine_is_a_coroutine():
    async with pool.WorkerPool(spawn=2):
        assert await routines.add(1, 2) == 3
        assert await routines.echo({"a": [1, 2.5, None]}) == {"a": [1, 2.5, None]}
        assert await routines.noop() is None


async def test_call_should_run_in_another_process():
    import os

    async with pool.WorkerPool(spawn=2) as p:
        worker_pid = await routines.pid()
        assert worker_pid != os.getpid()
        assert worker_pid in p.pids


async def test_generator_should_stream_values_in_order():
    async with pool.WorkerPool(spawn=1):
        assert [i async for i in routines.count(5)] == [0, 1, 2, 3, 4]
        assert [i async for i in routines.count(0)] == []


async def test_generator_should_support_asend_and_athrow():
    async with pool.WorkerPool(spawn=1):
        gen = routines.accumulate()
        assert await gen.asend(None) == 0
        assert await gen.asend(5) == 5
        assert await gen.asend(2) == 7
        assert await gen.athrow(ValueError) == 0
        assert await gen.asend(1) == 1
        await gen.aclose()
        with pytest.raises(StopAsyncIteration):
            await gen.__anext__()


async def test_aclose_should_run_the_remote_finally_block():
    async with Signals() as signals, pool.WorkerPool(spawn=1):
        gen = routines.guarded_stream(signals.address)
        assert await gen.__anext__() == 0
        assert await gen.__anext__() == 1
        await gen.aclose()
        assert (await signals.wait("closed")).startswith("closed")


async def test_breaking_out_of_async_for_should_close_the_remote_generator():
    async with Signals() as signals, pool.WorkerPool(spawn=1):
        gen = routines.guarded_stream(signals.address)
        async for i in gen:
            if i == 3:
                break
        del gen  # dropped without aclose(): the pool cancels it remotely
        await signals.wait("closed", timeout=10)


async def test_exception_should_keep_its_type_and_show_the_remote_traceback():
    async with pool.WorkerPool(spawn=1):
        with pytest.raises(ValueError, match="boom") as info:
            await routines.fail("boom")
    cause = info.value.__cause__
    assert isinstance(cause, pool.RemoteTraceback)
    assert "in fail" in cause.tb and "raise ValueError(message)" in cause.tb
    assert "[worker traceback]" in "".join(traceback.format_exception(info.value))


async def test_exception_should_keep_its_attributes_when_custom():
    async with pool.WorkerPool(spawn=1):
        with pytest.raises(routines.Custom) as info:
            await routines.fail_custom()
    assert (info.value.code, info.value.detail) == (7, "seven")


async def test_method_routine_should_receive_its_instance():
    async with pool.WorkerPool(spawn=1):
        assert await routines.Counter(10).plus(5) == 15


async def test_nested_call_should_dispatch_through_the_pool():
    async with pool.WorkerPool(spawn=2):
        assert await routines.fact(6) == 720
        assert [i async for i in routines.nested_count(3)] == [0, 10, 20]


async def test_nested_calls_should_spread_over_the_pool():
    async with pool.WorkerPool(spawn=2) as p:
        pids = await routines.call_pids(20)
        assert len(pids) == 20
        assert set(pids) <= set(p.pids)


async def test_cancelling_the_caller_should_cancel_the_remote_task():
    async with Signals() as signals, pool.WorkerPool(spawn=1):
        call = asyncio.ensure_future(routines.sleep(60, signals.address, "victim"))
        await signals.wait("started victim")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert await signals.wait("cancelled victim") == "cancelled victim"


async def test_timeout_should_raise_and_cancel_the_remote_task():
    async with Signals() as signals, pool.WorkerPool(spawn=1):
        slow = routines.sleep.options(timeout=0.5)
        with pytest.raises(TimeoutError):
            await slow(60, signals.address, "late")
        await signals.wait("cancelled late")
        assert await routines.add(2, 2) == 4  # the worker still serves


async def test_timeout_should_not_fire_when_the_call_is_fast_enough():
    async with pool.WorkerPool(spawn=1):
        assert await routines.sleep.options(timeout=10)(0.01) == 0.01


async def test_many_concurrent_calls_should_all_complete():
    async with pool.WorkerPool(spawn=2) as p:
        results = await asyncio.gather(*(routines.add(i, i) for i in range(500)))
        assert results == [2 * i for i in range(500)]
        assert p.in_flight() == 0


async def test_routine_called_without_a_pool_should_say_how_to_start_one():
    with pytest.raises(pool.PoolClosed, match=r"async with pool.WorkerPool"):
        routines.add(1, 2)


async def test_routine_called_after_the_pool_closed_should_raise_pool_closed():
    async with pool.WorkerPool(spawn=1) as p:
        task = routines.add.task((1, 2), {})
    with pytest.raises(pool.PoolClosed):
        await p.call(task)
