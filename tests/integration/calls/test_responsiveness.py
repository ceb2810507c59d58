"""A worker whose routine hogs the CPU still answers new dispatches promptly."""

from __future__ import annotations

import asyncio
import contextlib
import pathlib
from collections.abc import AsyncIterator, Callable

import pytest

import pool
from backpressure import LoopLagBackpressure
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


@contextlib.asynccontextmanager
async def spinning_worker(
    tmp_path: pathlib.Path,
    make_pool: Callable[[], pool.WorkerPool] = lambda: pool.WorkerPool(spawn=1),
) -> AsyncIterator[tuple[pool.WorkerPool, asyncio.Future[int], pathlib.Path]]:
    """A pool whose one worker runs a routine that holds its loop (spins the CPU) until ``release`` exists.

    Yields the pool, the spin and ``release``. The spin ends only when the test
    (or this helper, on the way out) creates ``release``: "while the routine
    holds the loop" is then an order of events, not a race against a clock.
    """
    release = tmp_path / "release"
    async with Signals() as signals, make_pool() as p:
        spinning = asyncio.ensure_future(routines.spin_until(str(release), signals.address))
        try:
            await signals.wait("spinning")
            yield p, spinning, release
        finally:
            release.touch()
            await asyncio.wait_for(spinning, HANG_S)  # (again, if the test did)


# The defect these tests catch is a worker whose I/O loop cannot answer while a routine holds it
# (the watch thread of pool/_worker/_overrun.py not taking over). Such a worker answers nothing
# until the routine lets go, and the routine here lets go only when the test says so: the call is
# passed over after ACCEPT_TIMEOUT_S (WorkerRejected DEADLINE_EXCEEDED), the state is never
# answered. A slow machine only delays an answer that does come while the routine still spins.
# How many milliseconds "promptly" is, bench/ measures.


async def test_busy_worker_should_accept_a_new_dispatch_promptly_while_a_routine_spins(tmp_path):
    async with spinning_worker(tmp_path) as (p, spinning, release):
        call = await asyncio.wait_for(p.dispatch(routines.add.task((1, 2), {})), HANG_S)  # returns once accepted
        call.cancel()
        assert not spinning.done()  # accepted while the routine still held the loop
        release.touch()
        await asyncio.wait_for(spinning, HANG_S)
        async with asyncio.timeout(HANG_S):  # the cancelled call, queued behind the spin, ends too
            while next(iter((await p.worker_states()).values())).in_flight:
                await asyncio.sleep(0.05)  # the worker's own report; no event carries it (bounded)


async def test_busy_worker_should_reject_a_new_dispatch_promptly_while_a_routine_spins(one_slot_pool, tmp_path):
    async with spinning_worker(tmp_path, lambda: one_slot_pool(1)) as (_, spinning, _):
        with pytest.raises(pool.NoWorkersAvailable) as info:
            await asyncio.wait_for(routines.add(1, 2), HANG_S)
        assert isinstance(info.value.__cause__, pool.WorkerRejected)
        # The worker's own Reject, not the pool giving up on a silent worker (DEADLINE_EXCEEDED).
        assert info.value.__cause__.code == "RESOURCE_EXHAUSTED"
        assert not spinning.done()


async def test_busy_worker_should_answer_state_promptly_while_a_routine_spins(tmp_path):
    async with spinning_worker(tmp_path) as (p, spinning, _):
        states = await p.worker_states(timeout=HANG_S)  # leaves out a worker that does not answer in time
        assert [state.in_flight for state in states.values()] == [1]
        assert not spinning.done()  # answered while the routine still held the loop


async def test_a_pool_that_connects_while_a_routine_spins_should_be_served_once_it_ends(tmp_path):
    """Test that a Dispatch connection the worker took while busy is served, not dropped."""
    async with spinning_worker(tmp_path) as (p, spinning, release):
        async with pool.WorkerPool(discovery=pool.StaticDiscovery(workers=p.workers.values())):
            added = asyncio.ensure_future(routines.add(1, 2))  # through the innermost pool: the second one
            assert not spinning.done()  # the second pool connected while the routine held the loop
            release.touch()
            async with asyncio.timeout(HANG_S):
                assert await added == 3


async def test_a_loop_lag_hook_should_turn_calls_away_while_a_routine_holds_the_loop(tmp_path):
    """Test that the time a routine has held the loop counts as lag now, not once the routine lets go."""
    lagging = LoopLagBackpressure(0.2)
    async with spinning_worker(tmp_path, lambda: pool.WorkerPool(spawn=1, backpressure=lagging)) as (p, spinning, _):
        # The spin lasts until released: a hook that counts the lag only once the routine lets go never
        # turns a call away here and the loop runs into HANG_S; a slow machine only takes more turns.
        async with asyncio.timeout(HANG_S):
            while True:
                try:
                    (await p.dispatch(routines.add.task((1, 2), {}))).cancel()  # accepted: queued behind the spin
                except pool.NoWorkersAvailable as exc:
                    assert isinstance(exc.__cause__, pool.WorkerRejected)
                    assert exc.__cause__.code == "RESOURCE_EXHAUSTED"
                    break
        assert not spinning.done()
