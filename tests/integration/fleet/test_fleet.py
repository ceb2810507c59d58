"""The pool's own workers under chaos: replacements that fail, and the max_workers ceiling.

Each test reproduces a defect a chaos soak found (random SIGKILLs under an
ebb-and-flow load) before it was fixed.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

import pool
from pool._fleet import _local_fleet as _fleet
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually, until_members

pytestmark = pytest.mark.integration


async def test_replacement_that_dies_before_ready_should_be_retried_until_the_pool_is_back_at_spawn(monkeypatch):
    """Test that a replacement which never reports READY is retried with back-off, not given up on."""
    monkeypatch.setattr(_fleet, "RESPAWN_BACKOFF_S", (0.0, 0.05, 0.1))
    async with pool.WorkerPool(spawn=1) as p:
        (uid,) = p.workers
        good_env = dict(p._layers.fleet._env)
        p._layers.fleet._env["LEAKYPOOL_MAX_LIFETIME"] = "not-a-number"  # replacements exit with status 2 at start-up
        (pid,) = p.pids
        os.kill(pid, signal.SIGKILL)
        await until_members(p, lambda p: not p.workers, timeout=30)
        await eventually(lambda: p.debug().crash_streak >= 3, timeout=30)  # several replacements died young
        assert p.debug().replacements_owed == 1 and not p.workers
        p._layers.fleet._env = good_env  # the cause is gone: the next attempt must succeed
        await until_members(p, lambda p: len(p.workers) == 1, timeout=30)
        assert uid not in p.workers
        assert await routines.add(1, 2) == 3
        assert p.debug().replacements_owed == 0


async def test_pool_should_never_exceed_max_workers_while_a_dead_worker_is_being_replaced(monkeypatch, one_slot_pool):
    """Test that a replacement owed during its back-off counts, so growth cannot go past max_workers."""
    monkeypatch.setattr(_fleet, "RESPAWN_BACKOFF_S", (0.0, 1.0))
    async with one_slot_pool(max_workers=1, queue_depth=10, dispatch_deadline=60) as p:
        sizes: list[int] = []
        ready = p._layers.fleet._on_ready

        def record(metadata: pool.WorkerMetadata) -> None:
            sizes.append(p.stats().local_workers)
            ready(metadata)

        p._layers.fleet._on_ready = record
        (pid,) = p.pids
        os.kill(pid, signal.SIGKILL)  # died young: its replacement waits out a back-off
        await until_members(p, lambda p: not p.workers, timeout=30)
        assert await asyncio.wait_for(routines.add(1, 2), 30) == 3  # queued meanwhile: starved the pool
        await eventually(lambda: p.debug().replacements_owed == 0 and not p.debug().growing, timeout=30)
        assert sizes and max(sizes) <= 1, sizes
        assert len(p.pids) == 1
