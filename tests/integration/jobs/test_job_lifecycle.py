"""Jobs for production, end to end on both stores: delays, priorities, retention, the jobs command, and a
submit inside the caller's PostgreSQL transaction. Real SQLite files, a real PostgreSQL server, real workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

import pool
from backpressure import TaskCountBackpressure
from pool._jobs import _retention, open_store
from pool._jobs._codec import RetryPolicy, encode
from pool._jobs._store import NewJob
from pool._transport._seal import MAC_BYTES, MAGIC
from tests.integration.observe.test_metrics import scrape
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.helpers import HANG_S, eventually
from tests.integration.support.signals import Signals
from tests.sealing import SEAL

pytestmark = pytest.mark.integration

SLOW_TICK = {"lease_ttl": 300}
"""The backstop tick every 100 s: anything that happens sooner was woken by a timer or a notice."""


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def jobs_command(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``leakypool jobs ...`` as an operator would (a real process, reaped by run)."""
    env = {**os.environ, "COLUMNS": "160"}
    return subprocess.run(
        [sys.executable, "-m", "pool._cli._main", "jobs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


async def test_a_delayed_job_should_start_at_its_due_time_neither_before_nor_at_the_tick(store):
    """Test delay= and run_at=: pending until due, started by the scheduler's timer (the tick is 100 s away)."""
    async with pool.WorkerPool(spawn=1, store=store, **SLOW_TICK) as p:
        await routines.noop()
        before = time.time()
        delayed = await routines.span.options(delay=0.6).submit(0, "delayed")
        after = time.time()
        at = datetime.datetime.fromtimestamp(before + 0.9, datetime.UTC)
        dated = await routines.span.options(run_at=at).submit(0, "dated")
        assert (delayed.state, dated.state) == ("pending", "pending")
        assert before + 0.6 <= delayed.run_at.timestamp() <= after + 0.6 and dated.run_at == at
        for job in (delayed, dated):
            # Within 60 s, so not by the tick (100 s away); how soon after its due time is bench_jobs.py's to measure.
            _, _, start, _ = await job.result(timeout=60)
            assert start >= job.run_at.timestamp()  # never before it is due
        assert (await p.jobs.get(delayed.id)).state == "succeeded"


async def test_a_delayed_job_should_be_cancellable_while_it_waits(store):
    async with pool.WorkerPool(spawn=1, store=store) as p:
        job = await routines.noop.options(delay=3600).submit()
        await job.cancel()
        assert job.state == "cancelled" and (await p.jobs.get(job.id)).state == "cancelled"


async def test_due_jobs_should_start_higher_priority_first_and_in_order_within_a_priority(store, tmp_path):
    """Test priority among jobs waiting for one busy worker slot: high ones first, FIFO within each."""
    gate = tmp_path / "go"
    async with Signals() as signals, pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(1), store=store):
        blocker = await routines.hold_until.submit(str(gate), signals.address, "blocker")
        await signals.wait("start blocker", timeout=30)
        jobs = []
        for tag, priority in [("low0", 0), ("high0", 5), ("low1", 0), ("mid", 1), ("high1", 5), ("low2", 0)]:
            jobs.append(await routines.span.options(priority=priority).submit(0, tag))
        gate.touch()
        await blocker.result(timeout=30)
        starts = sorted([await job.result(timeout=30) for job in jobs], key=lambda r: r[2])
        assert [tag for tag, *_ in starts] == ["high0", "high1", "mid", "low0", "low1", "low2"]


async def test_retention_should_purge_finished_jobs_under_load_and_never_an_active_one(store, tmp_path, monkeypatch):
    """Test keep_finished: finished jobs go in batches while others run and wait; running and delayed ones stay."""
    monkeypatch.setattr(_retention, "PURGE_EVERY_S", 0.2)
    monkeypatch.setattr(_retention, "PURGE_BATCH", 7)  # several batches per pass
    gate = tmp_path / "go"
    async with Signals() as signals, pool.WorkerPool(spawn=2, store=store, keep_finished=0.5, metrics_port=0) as p:
        held = await routines.hold_until.submit(str(gate), signals.address, "held")
        await signals.wait("start held", timeout=30)
        delayed = await routines.add.options(delay=3600).submit(2, 2)  # not due during the test, however slow
        for wave in range(3):  # submissions and completions while purges run
            results = await asyncio.gather(
                *[(await routines.add.submit(wave, i)).result(timeout=30) for i in range(20)]
            )
            assert results == [wave + i for i in range(20)]

        async def only_active_left() -> bool:
            return sorted(j.id for j in await p.jobs.list()) == sorted([held.id, delayed.id])

        await eventually(only_active_left, timeout=30)
        assert p.jobs.purged >= 60
        assert (await scrape(p))[("leakypool_jobs_purged_total", ())] == p.jobs.purged
        assert (await p.jobs.get(held.id)).state == "running" and (await p.jobs.get(delayed.id)).state == "pending"
        gate.touch()
        assert await held.result(timeout=30) == "held"


async def test_the_jobs_command_should_list_show_retry_cancel_and_purge_a_real_store(store):
    """Test ``leakypool jobs`` on a store a pool uses: a failed job found, retried (history kept), run again."""
    async with pool.WorkerPool(spawn=1, store=store) as p:
        failed = await routines.fail.submit("kaput")
        with pytest.raises(ValueError):
            await failed.result(timeout=30)
        later = await routines.noop.options(delay=3600).submit()
        listed = jobs_command(store, "--json", "list", "--state", "failed", "--routine", "fail")
        assert listed.returncode == 0, listed.stderr
        assert [(j["id"], j["attempts"]) for j in json.loads(listed.stdout)] == [(failed.id, 1)]
        table = jobs_command(store, "list")
        assert table.returncode == 0 and failed.id in table.stdout and "failed" in table.stdout
        shown = jobs_command(store, "show", failed.id, "--json")
        assert json.loads(shown.stdout)["error"].startswith("ValueError: kaput")
        retried = json.loads(jobs_command(store, "retry", failed.id, "--json").stdout)
        assert (retried["state"], retried["attempts"], retried["max_attempts"]) == ("pending", 1, 2)
        assert retried["error"].startswith("ValueError: kaput")  # its history stays until the next attempt ends

        async def failed_again() -> bool:
            job = await p.jobs.get(failed.id)
            return job.state == "failed" and job.attempts == 2

        await eventually(failed_again, timeout=30)
        cancelled = jobs_command(store, "cancel", later.id, "--json")
        assert json.loads(cancelled.stdout)["state"] == "cancelled"
        purged = jobs_command(store, "purge", "--older-than", "0s", "--json")
        assert json.loads(purged.stdout)["purged"] == 2
        assert await p.jobs.list() == []
    for args, message in [
        (["show", "no-such-job"], "no job 'no-such-job'"),
        (["retry", "no-such-job"], "no job 'no-such-job'"),
        (["purge", "--older-than", "soon"], "expected an age like"),
    ]:
        bad = jobs_command(store, *args)
        assert bad.returncode in (1, 2) and bad.stdout == ""
        assert bad.stderr.count("\n") == 1 and message in bad.stderr and "Traceback" not in bad.stderr


async def test_an_older_releases_rows_should_fail_clearly_until_the_jobs_command_signs_them(store):
    """Test the migration step (issue 51): rows an older release wrote carry no seal; `leakypool jobs URL sign`
    seals them (the operator vouches for them), after which they run; one left unsigned fails, naming the step."""
    raw = open_store(store)
    await raw.open()
    try:
        for job_id in ("old-signed", "old-unsigned"):
            sealed = encode(routines.add.task((1, 2), {}), RetryPolicy(), job_id, SEAL)
            now = time.time()
            legacy = NewJob(job_id, "add", sealed[len(MAGIC) + MAC_BYTES :], now, now + 600, next_at=now)  # as then
            await raw.submit(legacy, None, "")
        signed = jobs_command(store, "--json", "sign", "--state", "pending")
        assert signed.returncode == 0, signed.stderr
        assert json.loads(signed.stdout)["signed"] == 2
        again = jobs_command(store, "--json", "sign")
        assert json.loads(again.stdout) | {"secret": ""} == {"signed": 0, "sealed_already": 2, "secret": ""}
        # Undo the second: it stands for a row the operator did not sign.
        record = await raw.get("old-unsigned")
        await raw.reseal("old-unsigned", record.payload[len(MAGIC) + MAC_BYTES :], None, (record.payload, None))
    finally:
        await raw.close()
    async with pool.WorkerPool(spawn=1, store=store) as p:
        assert await (await p.jobs.get("old-signed")).result(timeout=30) == 3
        with pytest.raises(
            pool.SerializationError, match=r"job old-unsigned is not sealed.*leakypool jobs STORE_URL sign"
        ):
            await (await p.jobs.get("old-unsigned")).result(timeout=30)


async def test_a_submit_in_the_callers_transaction_should_exist_iff_it_commits_and_wake_another_process(postgres_url):
    """Test options(connection=conn): a rollback leaves nothing; a commit wakes the process with workers."""
    import asyncpg

    async with pool.WorkerPool(spawn=1, store=postgres_url, **SLOW_TICK) as runner:
        await routines.noop()  # the runner is parked until its tick or a notice
        async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=postgres_url, **SLOW_TICK) as api:
            conn = await asyncpg.connect(postgres_url)
            try:
                with pytest.raises(RuntimeError, match="the order failed"):
                    async with conn.transaction():
                        gone = await routines.pid.options(connection=conn, job_id="gone").submit()
                        assert gone.state == "pending"
                        raise RuntimeError("the order failed")
                assert await api.jobs.get("gone") is None
                async with conn.transaction():
                    job = await routines.pid.options(connection=conn).submit()
                    assert await api.jobs.get(job.id) is None  # not visible before the commit
                assert await job.result(timeout=30) == runner.pids[0]
                with pytest.raises(pool.ConfigError, match="inside a transaction"):
                    await routines.pid.options(connection=conn).submit()
            finally:
                await conn.close()


async def test_a_submit_with_a_connection_should_need_a_postgresql_store(store_url):
    class NotAConnection:
        def is_in_transaction(self) -> bool:
            return True

    async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store_url):
        with pytest.raises(pool.ConfigError, match="needs a PostgreSQL store"):
            await routines.noop.options(connection=NotAConnection()).submit()


async def test_calls_waiting_for_a_worker_should_start_higher_priority_first(one_slot_pool, tmp_path):
    """Test options(priority=...) on calls in the admission queue: by priority, FIFO within one."""
    release = str(tmp_path / "release")
    async with Signals() as signals, one_slot_pool(queue_depth=10) as p:
        # The blocker holds the worker until every call is queued: a slow machine cannot let it end
        # first (and the calls start in arrival order instead of the queue's).
        blocker = asyncio.ensure_future(routines.hold_until(release, signals.address, "blocker"))
        await signals.wait("start blocker")
        calls = []
        for tag, priority in [("low0", 0), ("high0", 3), ("low1", 0), ("high1", 3), ("neg", -1)]:
            calls.append(asyncio.ensure_future(routines.span.options(priority=priority)(0.01, tag)))
            await asyncio.sleep(0)  # make the arrival order unambiguous
        await eventually(lambda: p.stats().waiting_for_worker == 5)
        pathlib.Path(release).touch()
        await asyncio.wait_for(blocker, HANG_S)
        results = await asyncio.gather(*calls)
    assert [r[0] for r in sorted(results, key=lambda r: r[2])] == ["high0", "high1", "low0", "low1", "neg"]


async def test_a_schedule_shared_by_three_processes_should_run_each_slot_exactly_once(store, tmp_path):
    """Test periodic jobs: three processes schedule the same per-second cron; every slot runs once, none twice."""
    markers = tmp_path / "markers"
    markers.mkdir()
    args = [sys.executable, "-m", "tests.integration.support.cron_replica", store, str(markers), "* * * * * */1"]
    async with contextlib.AsyncExitStack() as stack:
        children = [
            await stack.enter_async_context(Child(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            for _ in range(3)
        ]
        names = {(await asyncio.wait_for(c.stdout.readline(), 60)).decode().split()[1] for c in children}
        assert len(names) == 1  # the same routine, expression and arguments: one schedule
        (name,) = names
        async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store) as observer:

            async def six_slots_done() -> bool:
                done = [j for j in await observer.jobs.list("succeeded", limit=1000) if j.id.startswith(name)]
                return len(done) >= 6

            await eventually(six_slots_done, timeout=90)
            for child in children:
                child.process.stdin.write(b"stop\n")
                child.process.stdin.close()
            for child in children:
                assert await child.wait(60) == 0
            slot_jobs = [j for j in await observer.jobs.list(limit=1000) if j.id.startswith(name)]
    slots = [int(j.id.rsplit("@", 1)[1]) for j in slot_jobs]
    # Each slot that ran, once. Not necessarily every second: a slot all three processes reach over 1 s late
    # (a loaded machine) is skipped, with a warning (tests/unit/pool/_jobs/test_periodic.py).
    assert len(set(slots)) == len(slots)
    done = [j for j in slot_jobs if j.state == "succeeded"]
    assert all(j.attempts == 1 for j in done) and len(done) >= 6
    assert all(j.started_at.timestamp() >= j.run_at.timestamp() for j in done)
    assert routines.executions(str(markers), "tick")[0] == len(done)  # nothing ran twice, nothing ran unrecorded


async def test_a_slot_missed_while_no_process_ran_should_run_once_at_start_up_and_say_so(store, tmp_path, caplog):
    """Test the catch-up: three hourly slots missed -> the latest one runs once, with a warning; not all three."""
    async with pool.WorkerPool(spawn=1, store=store) as p:
        name = p.schedule(routines.mark, cron="0 * * * *", args=(str(tmp_path), "hourly"))
    store_object = open_store(store)
    await store_object.open()
    try:
        previous = await store_object.schedule_slot(name, 0.0, None)  # reads the start recorded above
        assert previous is not None
        rewind = "UPDATE {} SET last_slot = last_slot - 3 * 3600"
        if store.startswith("sqlite"):
            await store_object._run(lambda db: db.execute(rewind.format("schedules")), write=True)
        else:
            await store_object._call("execute", rewind.format("leakypool_schedules"))
    finally:
        await store_object.close()
    caplog.set_level("WARNING", logger="leakypool.jobs")
    async with pool.WorkerPool(spawn=1, store=store) as p:
        assert p.schedule(routines.mark, cron="0 * * * *", args=(str(tmp_path), "hourly")) == name

        async def caught_up() -> bool:
            return any(j.state == "succeeded" for j in await p.jobs.list())

        await eventually(caught_up, timeout=30)
        (job,) = await p.jobs.list()  # the latest slot only, not each one missed
    # The latest slot is the one recorded before, or the next if an hour began in between (no clock margin).
    slot = float(job.id.removeprefix(f"{name}@"))
    assert slot in (previous, previous + 3600)
    assert routines.executions(str(tmp_path), "hourly") == (1, 1)
    warnings = [r.getMessage() for r in caplog.records if "missed" in r.getMessage()]
    missed = 3 + round((slot - previous) / 3600)
    assert len(warnings) == 1 and f"missed {missed} slot(s)" in warnings[0] and "running the latest" in warnings[0]


async def test_a_bad_schedule_should_fail_in_one_line(store_url):
    async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store_url) as p:
        for kwargs, message in [
            ({"cron": "every day at 7"}, "cron: expected 'minute hour day month weekday'"),
            ({"cron": "61 * * * *"}, "cron: expected"),
            ({"cron": "0 7 * * *", "tz": "Mars/Olympus"}, "tz: expected an IANA time zone name"),
        ]:
            with pytest.raises(pool.ConfigError, match=message) as info:
                p.schedule(routines.noop, **kwargs)
            assert "\n" not in str(info.value)


API = pool.Queue("api", concurrency=10, rate=pool.RateLimit(3, per=1.0))


async def test_a_rate_limit_should_hold_across_three_processes(store, tmp_path):
    """Test RateLimit for jobs: 15 jobs of one key run by three processes; no second holds more than 3 starts."""
    args = [sys.executable, "-m", "tests.integration.support.store_runner", store, "1.5"]
    async with contextlib.AsyncExitStack() as stack:
        runners = [
            await stack.enter_async_context(Child(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE))
            for _ in range(3)
        ]
        pids = {int((await asyncio.wait_for(r.stdout.readline(), 60)).split()[1]) for r in runners}
        async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store):
            first_due = time.time()  # before the first job is due: no lease of them can come sooner
            jobs = [
                await routines.interval.options(queue=API, key="tenant").submit(str(tmp_path), "runs", "tenant", 0)
                for _ in range(15)
            ]
            other = await routines.interval.options(queue=API, key="other").submit(str(tmp_path), "other", "other", 0)
            for job in [*jobs, other]:
                await job.result(timeout=60)
        for runner in runners:
            runner.process.stdin.write(b"stop\n")
            runner.process.stdin.close()
        for runner in runners:
            assert await runner.wait(60) == 0
    starts = sorted(float(line.split()[0]) for line in (tmp_path / "runs").read_text().splitlines())
    ran_on = {int(line.split()[3]) for line in (tmp_path / "runs").read_text().splitlines()}
    assert len(starts) == 15 and ran_on <= pids
    assert_rate_held(starts, first_due, 3, 1.0)


def assert_rate_held(starts: list[float], first_due: float, n: int, per: float) -> None:
    """Check what a rate limit guarantees, with no margin for a busy machine to eat.

    The limit holds the grants (the store's leases, the book's dispatches): the (k+n)-th comes at least
    ``per`` after the k-th, and the first not before ``first_due``, so the j-th grant (from 0) comes at or
    after ``first_due + (j // n) * per``. A start follows its grant (by any delay), so the j-th start, in
    order, does too. Without the limit the fourth would start well within the first window.
    """
    for j, start in enumerate(sorted(starts)):
        assert start >= first_due + (j // n) * per - 1e-3, (j, start - first_due)


async def test_a_rate_limit_should_space_calls_in_this_process(one_slot_pool):
    """Test RateLimit for calls: in-process, per key; the calls over the rate wait (in order), then run."""
    queue = pool.Queue("calls", concurrency=10, rate=pool.RateLimit(2, per=0.5))
    async with one_slot_pool(spawn=2, queue_depth=10):
        await asyncio.gather(*(routines.span(0.05, "warm") for _ in range(2)))  # both workers have the routine
        first_due = time.time()
        results = await asyncio.gather(*(routines.span.options(queue=queue, key="k")(0, i) for i in range(6)))
        assert_rate_held([r[2] for r in results], first_due, 2, 0.5)  # the book spaces dispatches
        # In arrival order: call i has the i-th grant (a start order could swap under load; a grant's bound not).
        assert all(start >= first_due + (i // 2) * 0.5 - 1e-3 for i, _, start, _ in results)
