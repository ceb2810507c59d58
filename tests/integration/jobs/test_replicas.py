"""Several dispatching processes (real subprocesses) on one store: shared backlog, shared limits, survivors.

Run for a SQLite file and for a real PostgreSQL server.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.routines.common import max_overlap
from tests.integration.support.child import Child
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgres"])
def shared_store(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'jobs.db'}"


TICKS_PER_LEASE = 3
"""A dispatching process renews its owner lease, and looks for dead owners' jobs, every lease_ttl / 3
(pool/_jobs/_presence.py)."""


def replica(url: str, markers, first: int, count: int, total: int, ttl: float = 10.0) -> Child:
    args = [
        sys.executable,
        "-m",
        "tests.integration.support.replica",
        url,
        str(markers),
        str(first),
        str(count),
        str(total),
        str(ttl),
    ]
    return Child(args, stdout=subprocess.PIPE)


def recorded(markers) -> dict[str, list[tuple[float, float, str, int]]]:
    runs: dict[str, list[tuple[float, float, str, int]]] = {}
    for name in os.listdir(markers):
        with open(markers / name) as f:
            for line in f.read().splitlines():
                start, end, key, pid = line.split()
                runs.setdefault(name, []).append((float(start), float(end), key, int(pid)))
    return runs


async def test_three_replicas_should_share_one_backlog_and_its_limits_exactly(shared_store, tmp_path):
    markers, total = tmp_path / "markers", 1000
    markers.mkdir()
    async with contextlib.AsyncExitStack() as stack:
        replicas = [
            await stack.enter_async_context(replica(shared_store, markers, first, count, total))
            for first, count in ((0, 334), (334, 333), (667, 333))
        ]
        for r in replicas:
            assert (await asyncio.wait_for(r.stdout.readline(), 120)).startswith(b"SUBMITTED")
        for r in replicas:
            async with asyncio.timeout(300):
                while not (line := await r.stdout.readline()).startswith(b"DRAINED"):  # (TICK, REVIVED lines)
                    assert line, "the replica ended before draining"
            assert await r.wait(60) == 0
    runs = recorded(markers)
    assert sorted(runs) == sorted(f"j{i}" for i in range(total))  # every job ran...
    assert all(len(r) == 1 for r in runs.values())  # ...once
    spans = [(start, end) for ((start, end, _, _),) in runs.values()]
    assert max_overlap(spans) <= 3  # the queue's total, across all processes
    for key in {r[0][2] for r in runs.values()}:
        assert max_overlap([(s, e) for ((s, e, k, _),) in runs.values() if k == key]) <= 1  # one per key


async def test_survivor_should_requeue_the_jobs_of_a_killed_replica(shared_store, tmp_path):
    """Test SIGKILL mid-drain: every job ends once more; only the dead replica's attempts ran twice."""
    markers, total, ttl = tmp_path / "markers", 300, 2.0
    markers.mkdir()
    async with (
        replica(shared_store, markers, 0, 150, total, ttl) as survivor,
        replica(shared_store, markers, 150, 150, total, ttl) as victim,
    ):
        started = [(await asyncio.wait_for(r.stdout.readline(), 120)).split() for r in (survivor, victim)]
        assert all(line[0] == b"SUBMITTED" for line in started)
        victim_worker = int(started[1][1])
        await eventually(lambda: len(os.listdir(markers)) >= 30, timeout=120)  # mid-drain
        victim.signal(signal.SIGKILL)
        killed_at = time.time()
        assert await victim.wait(30) == -signal.SIGKILL
        revived_at = None
        ticks: list[float] = []  # when the survivor renewed its lease (each tick)
        async with asyncio.timeout(300):
            while not (line := await survivor.stdout.readline()).startswith(b"DRAINED"):
                assert line, "the survivor ended before draining"
                if line.startswith(b"REVIVED") and revived_at is None:
                    revived_at = float(line.split()[1])
                if line.startswith(b"TICK"):
                    ticks.append(float(line.split()[1]))
        assert await survivor.wait(60) == 0
    runs = recorded(markers)
    assert sorted(runs) == sorted(f"j{i}" for i in range(total))  # none lost: the survivor revived the orphans
    twice = {name: r for name, r in runs.items() if len(r) > 1}
    assert all(pid == victim_worker for r in twice.values() for _, _, _, pid in r[:-1])  # the dead one's attempts
    assert len(twice) <= 4  # at most what its one worker (4 slots) was running
    if revived_at is not None:  # the victim had jobs running when it died: report how long they stayed orphaned
        print(
            f"\nrecovery after SIGKILL ({shared_store.split(':')[0]}, lease_ttl={ttl}): "
            f"{revived_at - killed_at:.2f}s (bound: lease + one tick = {ttl + ttl / 3:.2f}s)"
        )
        # Counted in the survivor's ticks, not in seconds: the victim's lease ends at most ttl after the
        # kill, and the survivor's ticks come at least ttl / TICKS_PER_LEASE apart (a busy machine only
        # spaces them further), so the (TICKS_PER_LEASE + 1)-th tick after the kill finds it expired and
        # re-queues. A survivor that re-queued later (or on another, slower path) renewed more often first.
        passed = [now - killed_at for now in ticks if killed_at < now <= revived_at]
        assert len(passed) <= TICKS_PER_LEASE + 1, (passed, revived_at - killed_at)


async def test_postgres_restart_mid_drain_should_lose_nothing_and_fail_submits_meanwhile_with_store_error(
    postgres_server, postgres_url, tmp_path
):
    """Test a database restart: the pool reconnects with back-off; a submit during the outage fails fast, named."""
    import pool
    from tests.integration.routines import common as routines

    markers = tmp_path / "markers"
    markers.mkdir()
    async with pool.WorkerPool(
        spawn=2, store=postgres_url, lease_ttl=30, store_retry=1
    ) as p:  # submits give up after 1 s
        jobs = [await routines.mark.submit(str(markers), f"m{i}", 0.02) for i in range(200)]
        await eventually(lambda: len(os.listdir(markers)) >= 20, timeout=60)
        postgres_server.stop("fast")  # connections drop; jobs in flight cannot be recorded yet
        try:
            with pytest.raises(pool.StoreError):
                await asyncio.wait_for(routines.add.submit(1, 2), 30)  # a named error, not a hang
        finally:
            postgres_server.start()
        results = [await job.result(timeout=120) for job in jobs]
        assert results == [f"m{i}" for i in range(200)]  # nothing lost
        assert (await p.jobs.counts())["succeeded"] == 200


async def test_ceiling_should_refuse_exactly_what_exceeds_it_across_processes(shared_store):
    """Test max_pending shared by three processes submitting at once: exactly the ceiling is admitted."""
    async with contextlib.AsyncExitStack() as stack:
        children = []
        for name in "abc":
            args = [sys.executable, "-m", "tests.integration.support.ceiling_replica", shared_store, name, "40", "50"]
            children.append(await stack.enter_async_context(Child(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)))
        for child in children:
            child.process.stdin.write(b"go\n")
            child.process.stdin.close()
        lines = [(await asyncio.wait_for(c.stdout.readline(), 120)).decode().split() for c in children]
        for child in children:
            assert await child.wait(60) == 0
    accepted = sum(int(line[1]) for line in lines)
    rejected = sum(int(line[3]) for line in lines)
    assert (accepted, rejected) == (50, 70)  # 120 submitted against a ceiling of 50


async def test_a_submitter_without_workers_should_leave_its_jobs_to_a_process_that_has_some(shared_store):
    """Test a worker-less API process: it neither keeps nor hoards jobs; a process with workers runs them."""
    import pool
    from tests.integration.routines import common as routines

    async with pool.WorkerPool(spawn=1, store=shared_store, lease_ttl=1.5) as runner:
        async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=shared_store, lease_ttl=1.5):
            jobs = [await routines.pid.submit() for _ in range(5)]  # submitted through the worker-less pool
            pids = {await job.result(timeout=30) for job in jobs}
        assert pids == set(runner.pids)
