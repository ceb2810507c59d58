"""Offers that know who is full: a pool skips workers that turned it away until they announce room.

Counts the Reject frames that reach the dispatching process (every frame a
worker sends goes through `Session.feed`), with real workers on real sockets.
"""

from __future__ import annotations

import asyncio
import os
import pathlib

import pytest

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from pool._transport._session import Session
from tests.integration.routines import common as routines
from tests.integration.routines import hooks
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def rejects(monkeypatch):
    """The number of Reject frames the pool has read so far (a one-item list)."""
    seen = [0]
    feed = Session.feed

    def counting(self, message):
        seen[0] += sum(1 for frame in message.frames if frame.HasField("reject"))
        return feed(self, message)

    monkeypatch.setattr(Session, "feed", counting)
    return seen


async def hold_lowest(p: pool.WorkerPool, count: int) -> list[asyncio.Task]:
    """Start ``count`` long calls, one per worker (cap 1), on the lowest uids; return their tasks."""
    holds = [asyncio.create_task(routines.sleep(120)) for _ in range(count)]
    await eventually(lambda: p.stats().running == count, timeout=60)
    return holds


async def release(holds: list[asyncio.Task]) -> None:
    for hold in holds:
        hold.cancel()
    await asyncio.gather(*holds, return_exceptions=True)


async def test_calls_behind_fifteen_full_workers_should_not_knock_on_each(rejects):
    """200 calls behind 15 full workers: at most one Reject per full worker (without the hint: 3,000)."""
    async with pool.WorkerPool(
        spawn=16, backpressure=TaskCountBackpressure(1), loadbalancer=PriorityLoadBalancer(), queue_depth=1000
    ) as p:
        await p.wait_for_workers(16, timeout=60)
        holds = await hold_lowest(p, 15)
        try:
            order = sorted(p.workers)
            last = p.workers[order[-1]].pid
            before = rejects[0]
            pids = [await routines.pid() for _ in range(200)]
            during = rejects[0] - before
        finally:
            await release(holds)
        assert set(pids) == {last}  # the one worker with room ran them all
        assert during <= 15, during
        # Once the long calls ended, the first workers are offered again: the leaky bucket's order holds.
        await eventually(lambda: not p.debug().known_full, timeout=30)
        assert await routines.pid() == p.workers[order[0]].pid


class StarvedWhileFlagged:
    """A hook that rejects, whatever the count, while a file named after the worker's pid exists (memory, say)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def __call__(self, ctx) -> bool:
        return os.path.exists(os.path.join(self.directory, str(os.getpid())))


async def test_a_worker_refusing_for_another_reason_should_be_passed_over_then_offered_again(rejects, tmp_path):
    """A worker with nothing running that refuses (its memory, not its count) is not taken for full:
    each call is rotated past it while it refuses, and it gets work again as soon as it accepts."""
    async with pool.WorkerPool(
        spawn=2, backpressure=StarvedWhileFlagged(str(tmp_path)), loadbalancer=PriorityLoadBalancer()
    ) as p:
        await p.wait_for_workers(2, timeout=60)
        first, second = (p.workers[uid].pid for uid in sorted(p.workers))
        assert await routines.pid() == first
        flag = pathlib.Path(tmp_path, str(first))
        flag.touch()
        before = rejects[0]
        pids = [await routines.pid() for _ in range(50)]
        assert set(pids) == {second}
        assert rejects[0] - before == 50  # offered each time (its refusal was not about its count)
        assert not p.debug().known_full
        flag.unlink()

        async def back_on_the_first() -> bool:
            return await routines.pid() == first

        await eventually(back_on_the_first, timeout=30)


async def test_a_hook_that_refuses_one_routine_should_not_hide_the_worker_from_others():
    """A task-dependent hook (it refuses `add` only) below its count: the worker still takes `echo`."""
    async with pool.WorkerPool(spawn=1, backpressure=hooks.RejectNamed("add")) as p:
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.add(1, 2)
        assert not p.debug().known_full
        assert await routines.echo("accepted") == "accepted"
