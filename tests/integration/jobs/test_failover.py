"""A PostgreSQL failover under load: the primary SIGKILLed, its synchronous standby promoted (issue 35, items 2-3).

Real servers started by the test (``initdb``, ``pg_basebackup -R``,
``synchronous_standby_names``), on loopback; a pool whose store URL lists
both hosts with ``target_session_attrs=read-write`` follows the promotion.
No submit raises, no committed job is lost, none runs more often than its
recorded attempts, and LISTEN/NOTIFY wake-ups resume on the new primary.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from tests import pg
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def replicated_pair():
    """(primary, synchronous standby, database) of a cluster of this test's own (it kills the primary)."""
    if pg.find_bindir() is None:
        pytest.skip("PostgreSQL is not installed here; tools/install_system_packages.sh installs it")
    with pg.server() as primary:
        primary.psql(f"CREATE DATABASE failover OWNER {pg.USER}")
        with pg.replicated(primary, synchronous=True) as standby:
            yield primary, standby, "failover"


async def test_a_pool_should_follow_a_promoted_standby_without_raising_or_losing_a_committed_job(
    replicated_pair, tmp_path
):
    import pool
    from tests.integration.routines import common as routines

    primary, standby, database = replicated_pair
    await eventually(lambda: primary.psql("SELECT sync_state FROM pg_stat_replication").strip() == "sync", timeout=60)
    url = (
        f"postgresql://{pg.USER}:{pg.PASSWORD}@127.0.0.1:{primary.port},127.0.0.1:{standby.port}/{database}"
        "?target_session_attrs=read-write"
    )
    marks = str(tmp_path)
    jobs: list = []
    errors: list = []
    stop = asyncio.Event()

    async def submitter(n: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                jobs.append(await routines.mark.submit(marks, f"{n}-{i}"))
            except Exception as exc:  # noqa: BLE001 - counted: the test asserts there are none
                errors.append(exc)
            i += 1
            await asyncio.sleep(0.01)

    # lease_ttl 300: the backstop tick (lease_ttl / 3) is 100 s away, so only a notice can start a job sooner
    async with pool.WorkerPool(spawn=2, store=url, store_retry=60, lease_ttl=300) as p:
        async with asyncio.TaskGroup() as group:
            for n in range(4):
                group.create_task(submitter(n))
            try:
                await eventually(lambda: len(jobs) >= 40, timeout=60)  # load under way
                os.kill(pg.postmaster_pid(primary), signal.SIGKILL)
                await asyncio.to_thread(standby.promote)
                promoted_at = len(jobs)
                await eventually(lambda: len(jobs) >= promoted_at + 40, timeout=90)  # submits go on, to the new primary
            finally:
                stop.set()
        assert errors == []  # no submit raised
        names = [await job.result(timeout=120) for job in jobs]  # none lost: every committed submit runs
        for job, name in zip(jobs, names, strict=True):
            await job.refresh()
            starts, _ = routines.executions(marks, name)
            assert 1 <= starts <= job.attempts, (job, starts)  # none ran again beyond the attempts the store recorded
        assert sum((await p.jobs.counts()).values()) == len(jobs)  # one row per submit
        async with pool.WorkerPool(spawn=0, store=url, store_retry=60, lease_ttl=300):  # another process, no workers
            job = await routines.add.submit(2, 3)
            # p starts it: LISTEN follows the new primary and its NOTIFY wakes p (30 s: far below p's 100 s tick)
            assert await job.result(timeout=30) == 5
