"""Tests for the job scheduler's decisions, with a real SQLite store and a scripted placement."""

from __future__ import annotations

import asyncio
import time

import pool
from pool._jobs._scheduler import Scheduler
from pool._jobs._stores._sqlite import SQLiteStore
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S, eventually
from tests.sealing import SEAL


class Script:
    """A placement whose answers the test controls: each call waits for the test to say what happens."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[asyncio.Future[object]] = asyncio.Queue()

    async def place(self, task):
        answer = asyncio.get_running_loop().create_future()
        await self.calls.put(answer)
        result = await answer
        if isinstance(result, BaseException):
            raise result
        return result


async def test_capacity_freed_during_a_refused_placement_should_retry_at_once(tmp_path):
    """Test the lost wake-up: a refusal that raced a capacity event must not park the job."""
    script = Script()
    scheduler = Scheduler(
        SQLiteStore(str(tmp_path / "jobs.db")),
        script.place,
        lambda: None,
        lease_ttl=600,
        default_deadline=600,
        max_pending=None,
        seal=SEAL,
    )
    await scheduler.store.open()
    try:
        await scheduler.start()
        job = await scheduler.jobs.submit(routines.add.task((1, 2), {}), routines.add.call_options)
        first = await asyncio.wait_for(scheduler_call(script), 5)
        scheduler.capacity_changed()  # a worker freed while the placement was being refused...
        first.set_result(pool.NoWorkersAvailable("busy"))
        second = await asyncio.wait_for(scheduler_call(script), 5)  # ...so it is offered again, unprompted
        second.set_result(None)  # (a limit is full this time: it waits for the next event)
        assert (await job.refresh()).state == "pending"
    finally:
        await scheduler.aclose()
        await scheduler.store.close()


async def scheduler_call(script: Script) -> asyncio.Future[object]:
    return await script.calls.get()


async def test_a_lease_that_failed_should_be_tried_again_once_the_store_is_back(tmp_path, monkeypatch):
    """Test that an outage during a lease does not lose the mark that the store holds jobs to lease."""
    script = Script()
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    lease, failures = store.lease, []

    async def failing_once(owner, limit, now):
        if not failures:
            failures.append(owner)
            raise pool.StoreError("the store went away for a moment")
        return await lease(owner, limit, now)

    monkeypatch.setattr(store, "lease", failing_once)
    scheduler = Scheduler(
        store, script.place, lambda: None, lease_ttl=600, default_deadline=600, max_pending=None, seal=SEAL
    )
    await store.open()
    try:
        other = Scheduler(
            store,
            script.place,
            lambda: None,
            lambda: False,
            lease_ttl=600,
            default_deadline=600,
            max_pending=None,
            seal=SEAL,
        )
        await other.jobs.submit(routines.add.task((1, 2), {}), routines.add.call_options)  # in the store, not kept
        await scheduler.start()  # its first lease fails; the tick is 200 s away
        first = await asyncio.wait_for(scheduler_call(script), 10)  # leased once the store answered again
        first.set_result(None)
        assert failures
    finally:
        await scheduler.aclose()
        await store.close()


async def test_a_job_the_store_has_running_here_but_nobody_runs_should_run_again_at_the_next_tick(tmp_path):
    """Test the reconcile step: a job the store has running under this live owner, run by no attempt here, is
    pending again at the next lease tick and placed (issue 40: a write reported failed though it committed left
    such a job for as long as the process lived, its lease renewed every tick so no other process revived it)."""
    script = Script()
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    # lease_ttl 0.3: a tick every 0.1 s; the wait below only ends a hung run
    scheduler = Scheduler(
        store, script.place, lambda: None, lease_ttl=0.3, default_deadline=600, max_pending=None, seal=SEAL
    )
    await store.open()
    try:
        await scheduler.start()
        new = scheduler.jobs.new_job(routines.add.task((1, 2), {}), routines.add.call_options, time.time())
        await store.submit(new, owner=scheduler.owner)  # what a lost answer leaves: running here, in the store only
        assert await store.mark_running(new.id, scheduler.owner, time.time())
        placed = await asyncio.wait_for(scheduler_call(script), HANG_S)  # given back at a tick, leased, placed
        placed.set_result(None)  # (a limit is full: it waits here)
        record = await store.get(new.id)
        assert record is not None and (record.state, record.attempts) == ("pending", 1)  # the lost attempt counted
    finally:
        await scheduler.aclose()
        await store.close()


async def test_a_store_back_after_an_outage_should_be_rescanned_at_once(tmp_path, monkeypatch):
    """Test that a store call answered after a lost connection makes the scheduler lease now: a job that came
    meanwhile may have sent no notice (SQLite sends none; a failover drops PostgreSQL's), and the tick is far."""
    script = Script()
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    get, failures = store.get, []

    async def lost_once(job_id):
        if not failures:
            failures.append(job_id)
            error = pool.StoreError("the connection was lost")
            error.__cause__ = ConnectionResetError("reset by peer")
            raise error
        return await get(job_id)

    scheduler = Scheduler(
        store, script.place, lambda: None, lease_ttl=600, default_deadline=600, max_pending=None, seal=SEAL
    )
    await store.open()
    try:
        due = time.time()
        await scheduler.start()  # its tick is 200 s away
        await eventually(lambda: scheduler._leased_at > due, timeout=HANG_S)  # it looked, and found nothing
        new = scheduler.jobs.new_job(routines.add.task((1, 2), {}), routines.add.call_options, due)
        await store.submit(new)  # another process's job, due before that look: no notice, no due time ahead
        monkeypatch.setattr(store, "get", lost_once)
        assert await scheduler.jobs.get(new.id) is not None  # answered on the second try: the store is back
        placed = await asyncio.wait_for(scheduler_call(script), HANG_S)  # so it leased at once
        placed.set_result(None)
        assert failures
    finally:
        await scheduler.aclose()
        await store.close()


class WatchedSQLiteStore(SQLiteStore):
    """A SQLite store with notices, as PostgreSQL's (a `WatchableStore`): `watch` says it listens, then waits."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.listening = asyncio.Event()

    async def watch(self, notice):
        self.listening.set()
        await asyncio.Event().wait()


async def test_a_store_with_notices_should_be_listened_to_through_its_retry_wrapper(tmp_path):
    """Test that the scheduler listens to a store that has `watch` (the RetryingStore around it forwards `watch`
    by __getattr__, which isinstance against a runtime protocol does not see from Python 3.12 on)."""
    store = WatchedSQLiteStore(str(tmp_path / "jobs.db"))
    scheduler = Scheduler(
        store, Script().place, lambda: None, lease_ttl=600, default_deadline=600, max_pending=None, seal=SEAL
    )
    await store.open()
    try:
        await scheduler.start()
        await asyncio.wait_for(store.listening.wait(), 10)
    finally:
        await scheduler.aclose()
        await store.close()
