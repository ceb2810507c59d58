"""Durable jobs end to end: real SQLite files, real worker subprocesses, real crashes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading

import pytest

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.helpers import HANG_S, eventually
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_submit_should_commit_a_job_whose_result_any_process_on_the_store_can_read(
    tmp_path, one_slot_store_pool, store_url
):
    async with one_slot_store_pool() as p:
        job = await routines.add.submit(1, 2)
        assert job.state == "pending" and job.attempts == 0
        assert await job.result(timeout=30) == 3
        await job.refresh()
        assert (job.state, job.attempts) == ("succeeded", 1)
        assert job.created_at <= job.started_at <= job.finished_at
        same = await p.jobs.get(job.id)
        assert same is not None and same.state == "succeeded" and await same.result() == 3
        assert [j.id for j in await p.jobs.list("succeeded")] == [job.id]
    async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store_url) as other:
        again = await other.jobs.get(job.id)  # another pool (process) on the same file, no workers needed
        assert again is not None and await again.result(timeout=5) == 3


async def test_failed_job_should_re_raise_the_routines_own_exception(tmp_path, one_slot_store_pool):
    async with one_slot_store_pool():
        job = await routines.fail.submit("kaput")
        with pytest.raises(ValueError, match="kaput") as info:
            await job.result(timeout=30)
        assert isinstance(info.value.__cause__, pool.RemoteTraceback)
        await job.refresh()
        assert job.state == "failed" and "ValueError: kaput" in job.error


async def test_job_should_be_running_the_moment_a_worker_accepts_it_and_never_while_it_waits(
    tmp_path, one_slot_store_pool
):
    gate = tmp_path / "go"
    async with Signals() as signals, one_slot_store_pool() as p:
        first = await routines.hold_until.submit(str(gate), signals.address, "first")
        others = [await routines.add.submit(i, i) for i in range(5)]
        await signals.wait("start first")  # the routine's first line ran; it is blocked now

        async def running() -> bool:  # the Accept is committed right after it arrives, maybe after the routine began
            await first.refresh()
            return first.state == "running"

        await eventually(running, timeout=30)
        assert first.attempts == 1
        counts = await p.jobs.counts()
        assert counts["running"] == 1 and counts["pending"] == 5  # one worker, one slot: the rest wait as pending
        observed = []
        gate.touch()
        for job in others:
            observed.append((await p.jobs.counts())["running"])
            await job.result(timeout=30)
        assert await first.result(timeout=30) == "first"
        assert max(observed) <= 1


async def test_jobs_should_wait_for_a_worker_and_fail_with_capacity_timeout_past_their_deadline(tmp_path, store_url):
    discovery = pool.StaticDiscovery()
    async with pool.WorkerPool(spawn=0, discovery=discovery, store=store_url) as p:
        patient = await routines.mark.options(dispatch_deadline=120).submit(str(tmp_path), "patient")
        hasty = await routines.mark.options(dispatch_deadline=0.5).submit(str(tmp_path), "hasty")
        with pytest.raises(pool.CapacityTimeout, match=r"mark\(\) found no worker within 0.5s"):
            await hasty.result(timeout=30)
        assert routines.executions(str(tmp_path), "hasty") == (0, 0)  # it never ran
        assert (await patient.refresh()).state == "pending"
        async with pool.WorkerPool(spawn=1) as provider:  # a worker appears
            (worker,) = provider.workers.values()
            discovery.add(pool.WorkerMetadata(uid=worker.uid, address=worker.address))
            assert await patient.result(timeout=30) == "patient"
        assert p.stats().capacity_timeouts == 0  # calls' counter: jobs report through the store


async def test_fifty_concurrent_submits_of_one_job_id_should_run_the_routine_once(tmp_path, store_url):
    async with pool.WorkerPool(spawn=2, store=store_url):
        jobs = await asyncio.gather(
            *(routines.mark.options(job_id="convert:a.pdf").submit(str(tmp_path), "once", 0.2) for _ in range(50))
        )
        assert {job.id for job in jobs} == {"convert:a.pdf"}
        assert await jobs[0].result(timeout=30) == "once"
        assert routines.executions(str(tmp_path), "once") == (1, 1)


async def test_cancel_should_stop_a_pending_job_before_it_runs_and_a_running_one_on_its_worker(
    tmp_path, one_slot_store_pool
):
    gate = tmp_path / "never"
    async with Signals() as signals, one_slot_store_pool() as p:
        running = await routines.hold_until.submit(str(gate), signals.address, "r")
        pending = await routines.mark.submit(str(tmp_path), "pending-one")
        await signals.wait("start r")
        await pending.cancel()
        assert pending.state == "cancelled"
        await running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running.result(timeout=30)
        await eventually(lambda: p.stats().running == 0, timeout=30)  # its worker slot is free again
        assert await routines.add(1, 1) == 2
    assert routines.executions(str(tmp_path), "pending-one") == (0, 0)


async def test_retries_should_rerun_a_job_on_a_listed_exception_and_after_a_lost_worker(tmp_path, store_url):
    async with pool.WorkerPool(spawn=1, store=store_url):
        flaky = await routines.flaky.options(retries=2, retry_backoff=0.01, retry_on=KeyError).submit(
            str(tmp_path), "flaky", 2
        )
        assert await flaky.result(timeout=60) == 3
        assert (await flaky.refresh()).attempts == 3
        unlisted = await routines.flaky.options(retries=2, retry_backoff=0.01).submit(str(tmp_path), "unlisted", 1)
        with pytest.raises(KeyError):
            await unlisted.result(timeout=60)  # KeyError is not in retry_on: no second attempt
        assert (await unlisted.refresh()).attempts == 1
        survivor = await routines.die_once.options(retries=1, retry_backoff=0.01).submit(str(tmp_path), "die")
        assert await survivor.result(timeout=60) == "survived"  # the worker died: at least once, run again
        assert (await survivor.refresh()).attempts == 2


async def test_a_retry_should_run_when_its_back_off_ends_not_at_the_lease_loops_tick(tmp_path, store_url):
    """Test that a job back in the store for a retry is leased when it comes due, not a third of a lease later.

    The lease loop slept on to its tick (lease_ttl / 3) after an attempt went
    back in the store: each retry of a 10 ms back-off waited ~3 s (20 s
    here), and this job, retried twice, would not finish within `HANG_S`.
    """
    async with pool.WorkerPool(spawn=1, store=store_url, lease_ttl=60):
        flaky = await routines.flaky.options(retries=2, retry_backoff=0.01, retry_on=KeyError).submit(
            str(tmp_path), "flaky", 2
        )
        assert await flaky.result(timeout=HANG_S) == 3


async def test_a_job_no_busy_worker_takes_should_fail_at_its_deadline_not_at_the_lease_loops_tick(tmp_path, store_url):
    """Test that a job put back to wait for room fails at its dispatch deadline while the lease loop sleeps.

    The worker is full (one slot, held), so the job's placement is turned
    away and it waits among the held jobs. The loop, asleep since before it
    came back, slept on to its tick (lease_ttl / 3: 20 s here) before it
    failed the job.
    """
    release = tmp_path / "release"
    async with (
        Signals() as signals,
        pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(1), store=store_url, lease_ttl=60),
    ):
        blocker = asyncio.ensure_future(routines.hold_until(str(release), signals.address, "blocker"))
        try:
            await signals.wait("start blocker")
            hasty = await routines.mark.options(dispatch_deadline=0.5).submit(str(tmp_path), "hasty")
            with pytest.raises(pool.CapacityTimeout, match=r"mark\(\) found no worker within 0.5s"):
                await hasty.result(timeout=10)
        finally:
            release.touch()
            await blocker
        assert routines.executions(str(tmp_path), "hasty") == (0, 0)  # it never ran


async def test_bad_input_should_fail_where_it_was_made(tmp_path, one_slot_store_pool):
    with pytest.raises(pool.ConfigError, match="store"):
        async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), use_env=False) as p:
            await routines.add.submit(1, 2)
    bad = tmp_path / "not-a-db"
    bad.write_text("hello, I am not a database\n" * 100)
    with pytest.raises(pool.ConfigError, match="not-a-db"):
        async with pool.WorkerPool(spawn=1, store=f"sqlite:///{bad}"):
            pass
    async with one_slot_store_pool() as p:
        with pytest.raises(pool.SerializationError):
            await routines.add.submit(threading.Lock(), 1)
        assert (await p.jobs.counts())["pending"] == 0  # nothing was stored
        too_big = await routines.big_result.submit(17 * 1024 * 1024)
        with pytest.raises(pool.SerializationError, match="over the"):
            await too_big.result(timeout=60)
        assert await (await routines.add.submit(2, 2)).result(timeout=30) == 4  # the store still works


async def test_restart_after_a_crash_mid_drain_should_lose_no_job_and_rerun_only_the_running_ones(tmp_path, store_url):
    """Seed 004's restart: SIGKILL the dispatching process mid-drain, start it again on the same file."""
    url, markers, count = store_url, tmp_path / "markers", 500
    markers.mkdir()
    args = [sys.executable, "-m", "tests.integration.support.job_driver", url, str(markers), str(count), "0.01"]
    async with Child(args, stdout=subprocess.PIPE) as first:
        assert (await asyncio.wait_for(first.stdout.readline(), 60)).startswith(b"SUBMITTED")
        await eventually(lambda: len(os.listdir(markers)) >= count // 3, timeout=120)  # mid-drain
        workers = _children(first.pid)
        first.signal(signal.SIGKILL)
        assert await first.wait(30) == -signal.SIGKILL
    await eventually(lambda: not any(_alive(pid) for pid in workers), timeout=30)  # their lifeline closed
    with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db")) as db:
        states = dict(db.execute("SELECT id, state FROM jobs"))
    assert len(states) == count and set(states.values()) <= {"pending", "running", "succeeded"}
    done_at_kill = {job for job, state in states.items() if state == "succeeded"}
    async with Child(args, stdout=subprocess.PIPE) as second:
        assert (await asyncio.wait_for(second.stdout.readline(), 60)).startswith(b"SUBMITTED")
        assert (await asyncio.wait_for(second.stdout.readline(), 300)).startswith(b"DRAINED")
        assert await second.wait(60) == 0
    with contextlib.closing(sqlite3.connect(tmp_path / "jobs.db")) as db:
        final = dict(db.execute("SELECT id, state FROM jobs"))
    assert set(final.values()) == {"succeeded"} and len(final) == count  # none lost
    runs = {f"job-{i}": routines.executions(str(markers), f"job-{i}")[0] for i in range(count)}
    assert min(runs.values()) >= 1
    twice = {job for job, n in runs.items() if n > 1}
    assert not twice & done_at_kill  # a committed outcome never runs again
    assert twice <= {job for job, state in states.items() if state != "succeeded"}
    assert len(twice) <= 2 + 2  # at most the two workers' running jobs (and their acceptances in flight)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def test_a_corrupt_result_or_an_unimportable_routine_should_fail_that_job_only(tmp_path, one_slot_store_pool):
    module = tmp_path / "caller_only_module.py"
    module.write_text("import pool\n\n@pool.routine\nasync def hidden(x):\n    return x\n")
    async with one_slot_store_pool():  # workers start before the module is importable
        sys.path.insert(0, str(tmp_path))
        try:
            import caller_only_module
        finally:
            sys.path.remove(str(tmp_path))
        try:
            unimportable = await caller_only_module.hidden.submit(1)
            corrupt = await routines.corrupt_result.submit()
            fine = await routines.add.submit(1, 1)
            with pytest.raises(pool.SerializationError, match="caller_only_module"):
                await unimportable.result(timeout=30)
            with pytest.raises(pool.SerializationError, match="cannot be loaded outside a worker"):
                await corrupt.result(timeout=30)
            assert await fine.result(timeout=30) == 2
            assert (await unimportable.refresh()).state == "failed"
            assert (await corrupt.refresh()).state == "succeeded"  # the worker's result was fine; reading it here fails
        finally:
            sys.modules.pop("caller_only_module", None)


async def test_jobs_that_find_no_worker_should_grow_a_pool_with_max_workers(tmp_path, store_url, one_slot_pool):
    gate = tmp_path / "go"
    async with Signals() as signals, one_slot_pool(max_workers=2, idle_timeout=30, store=store_url) as p:
        jobs = [await routines.hold_until.submit(str(gate), signals.address, f"j{i}") for i in range(2)]
        await signals.wait("start j0")
        await signals.wait("start j1")  # both run at once: the pool grew by one worker on overflow
        assert len(p.pids) == 2 and p.stats().grown == 1
        gate.touch()
        assert [await job.result(timeout=30) for job in jobs] == ["j0", "j1"]


async def test_a_quick_job_should_be_recorded_in_one_write_and_a_longer_one_seen_running(store_url, monkeypatch):
    """A job that ends at once skips its running mark (one write, attempts and start included); one that
    runs longer than a moment is marked running while it runs."""
    from pool._jobs import _recorder
    from pool._jobs._stores._sqlite import SQLiteStore

    marks = []
    mark_running = SQLiteStore.mark_running

    async def counted(self, job_id, owner, now):
        marks.append(job_id)
        return await mark_running(self, job_id, owner, now)

    monkeypatch.setattr(SQLiteStore, "mark_running", counted)
    moment = _recorder.RUNNING_AFTER_S
    monkeypatch.setattr(_recorder, "RUNNING_AFTER_S", 30.0)  # "at once", however loaded the machine
    async with pool.WorkerPool(spawn=1, store=store_url) as p:
        quick = await routines.add.options(job_id="quick").submit(1, 2)
        assert await quick.result(timeout=30) == 3
        monkeypatch.setattr(_recorder, "RUNNING_AFTER_S", moment)
        record = await quick.refresh()
        assert (record.state, record.attempts, marks) == ("succeeded", 1, [])
        assert record.started_at is not None and record.started_at <= record.finished_at
        slow = await routines.sleep.options(job_id="slow").submit(0.5)

        async def seen_running() -> bool:
            return (await p.jobs.get("slow")).state == "running"

        await eventually(seen_running, timeout=30)
        assert await slow.result(timeout=30) == 0.5
        assert marks == ["slow"]
