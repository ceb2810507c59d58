"""A worker whose routine hogs the CPU still answers new dispatches promptly."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest

import pool
from backpressure import LoopLagBackpressure
from tests.integration import routines
from tests.integration.signals import Signals

pytestmark = pytest.mark.integration

PROMPT_S = 0.5
"""Generous bound for "promptly" (the bench measures the real figure: milliseconds)."""


@contextlib.asynccontextmanager
async def spinning_worker(
    make_pool: Callable[[], pool.WorkerPool] = lambda: pool.WorkerPool(spawn=1),
) -> AsyncIterator[tuple[pool.WorkerPool, asyncio.Future[None]]]:
    """A pool whose one worker runs a routine that spins the CPU for 2 s; yields the pool and the spin."""
    async with Signals() as signals, make_pool() as p:
        spinning = asyncio.ensure_future(routines.spin(2.0, signals.address))
        await signals.wait("spinning")
        yield p, spinning
        await spinning  # (again, if the test did)


async def test_busy_worker_should_accept_a_new_dispatch_promptly_while_a_routine_spins():
    async with spinning_worker() as (p, spinning):
        t0 = time.perf_counter()
        call = await p.dispatch(routines.add.task((1, 2), {}))  # returns once the worker accepted
        accepted_after = time.perf_counter() - t0
        call.cancel()
        assert accepted_after < PROMPT_S
        assert not spinning.done()
        await spinning
        async with asyncio.timeout(30):  # the cancelled call, queued behind the spin, ends too
            while next(iter((await p.worker_states()).values())).in_flight:
                await asyncio.sleep(0.05)  # the worker's own report; no event carries it (bounded)


async def test_busy_worker_should_reject_a_new_dispatch_promptly_while_a_routine_spins(one_slot_pool):
    async with spinning_worker(lambda: one_slot_pool(1)) as (_, spinning):
        t0 = time.perf_counter()
        with pytest.raises(pool.NoWorkersAvailable) as info:
            await routines.add(1, 2)
        assert time.perf_counter() - t0 < PROMPT_S
        assert isinstance(info.value.__cause__, pool.WorkerRejected)
        assert info.value.__cause__.code == "RESOURCE_EXHAUSTED"
        assert not spinning.done()
        await spinning


async def test_busy_worker_should_answer_state_promptly_while_a_routine_spins():
    async with spinning_worker() as (p, spinning):
        t0 = time.perf_counter()
        states = await p.worker_states(timeout=PROMPT_S)  # leaves out a worker that does not answer in time
        answered_after = time.perf_counter() - t0
        assert [state.in_flight for state in states.values()] == [1]
        assert answered_after < PROMPT_S
        assert not spinning.done()
        await spinning


async def test_a_pool_that_connects_while_a_routine_spins_should_be_served_once_it_ends():
    """Test that a Dispatch connection the worker took while busy is served, not dropped."""
    async with spinning_worker() as (p, spinning):
        async with pool.WorkerPool(discovery=pool.StaticDiscovery(workers=p.workers.values())):
            added = asyncio.ensure_future(routines.add(1, 2))  # through the innermost pool: the second one
            await spinning
            async with asyncio.timeout(30):
                assert await added == 3


async def test_a_loop_lag_hook_should_turn_calls_away_while_a_routine_holds_the_loop():
    """Test that the time a routine has held the loop counts as lag now, not once the routine lets go."""
    lagging = LoopLagBackpressure(0.2)
    async with spinning_worker(lambda: pool.WorkerPool(spawn=1, backpressure=lagging)) as (p, spinning):
        async with asyncio.timeout(1.5):  # within the spin: the lag passes 0.2 s after 0.2 s of it
            while True:
                try:
                    (await p.dispatch(routines.add.task((1, 2), {}))).cancel()  # accepted: queued behind the spin
                except pool.NoWorkersAvailable as exc:
                    assert isinstance(exc.__cause__, pool.WorkerRejected)
                    assert exc.__cause__.code == "RESOURCE_EXHAUSTED"
                    break
        assert not spinning.done()
        await spinning
