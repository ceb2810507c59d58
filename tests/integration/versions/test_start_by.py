"""Issue 54 item 3: a job's call carries the latest time it may start, and its worker enforces it.

A real worker whose first placement is delayed inside it (a slow async backpressure hook, as a stalled process or
network would delay it on the way) past the start-by time of its dispatching process's owner lease: the worker
declines it unstarted, the job goes back to the store, and it runs once, later.
"""

from __future__ import annotations

import logging

import pytest

import pool
from tests.integration.routines import common as routines

pytestmark = pytest.mark.integration

WAIT_S = 60.0


async def test_a_placement_that_reaches_its_worker_after_its_start_by_time_should_never_start(tmp_path, caplog):
    """Test lease_ttl 1.5 s (start by at most 1 s after a placement) against a first vetting of 2 s: declined late,
    given back, leased again and run once (placed twice); the job records one attempt."""
    caplog.set_level(logging.WARNING, logger="leakypool.jobs")
    vets = tmp_path / "vets"
    hook = routines.SlowFirstVet(2.0, str(vets))
    async with pool.WorkerPool(spawn=1, backpressure=hook, store=f"sqlite:///{tmp_path / 'jobs.db'}", lease_ttl=1.5):
        job = await routines.mark.submit(str(tmp_path), "x")
        assert await job.result(timeout=WAIT_S) == "x"
        await job.refresh()
        assert job.attempts == 1
    assert routines.executions(str(tmp_path), "x") == (1, 1)  # the late placement never started it...
    assert vets.read_text().split("\n") == ["vet mark", "vet mark", ""]  # ...the next one did
    assert f"job {job.id} (mark()) was not started" in caplog.text
    assert "past its start-by time" in caplog.text
