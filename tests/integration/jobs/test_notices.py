"""Processes on one PostgreSQL store wake each other (LISTEN/NOTIFY) instead of waiting for their tick.

The pools here renew their lease every 100 s (lease_ttl=300), so their
backstop tick is far beyond each wait: only a notice can pass these tests.
"""

from __future__ import annotations

import asyncio

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration

SLOW_TICK = {"lease_ttl": 300}


def submitter(url: str) -> pool.WorkerPool:
    """An API process without workers: its jobs are for the others."""
    return pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=url, **SLOW_TICK)


async def test_another_process_should_start_a_submitted_job_at_once_not_at_its_tick(postgres_url):
    """Test the "due" notice: a job submitted where no worker is runs in the process that has one."""
    async with pool.WorkerPool(spawn=1, store=postgres_url, **SLOW_TICK) as runner:
        await routines.noop()  # the runner is idle, parked until its tick or a notice
        async with submitter(postgres_url):
            for _ in range(3):  # each while the runner is parked again
                job = await routines.pid.submit()
                assert await job.result(timeout=30) == runner.pids[0]


async def test_a_cancel_from_another_process_should_reach_the_running_job_at_once(postgres_url):
    """Test the "cancel" notice: the owner cancels its running job now, not at its next tick."""
    async with Signals() as signals, pool.WorkerPool(spawn=1, store=postgres_url, **SLOW_TICK):
        async with submitter(postgres_url) as api:
            job = await routines.sleep.submit(600, signals.address, "long")
            await signals.wait("started long", timeout=30)
            await (await api.jobs.get(job.id)).cancel()  # as another replica would: by id, through the store
            await signals.wait("cancelled long", timeout=30)
            with pytest.raises(asyncio.CancelledError):
                await job.result(timeout=30)
            assert (await api.jobs.get(job.id)).state == "cancelled"
