"""The job store contract, run against every backend: SQLite files and a real PostgreSQL server.

One parametrised suite: a backend plugs in by adding a param to the `backend` fixture (conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator

import pytest

import pool
from pool._jobs._store import JobStore, MaintainedStore, NewJob
from pool._jobs._stores import _postgres_sql as postgres_sql
from pool._jobs._stores import _sqlite_schema as sqlite_schema
from pool._jobs._stores._postgres import PostgresStore
from pool._jobs._stores._sqlite import SQLiteStore

NOW = 1_000_000.0


@contextlib.asynccontextmanager
async def opened(backend, tmp_path, name: str = "jobs.db") -> AsyncIterator[JobStore]:
    if isinstance(backend, tuple) and backend[0] == "postgres":
        store: JobStore = PostgresStore(backend[1])
    elif isinstance(backend, tuple):
        store = SQLiteStore(backend[1])
    else:
        store = SQLiteStore(str(tmp_path / name))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def job(
    job_id: str = "a", *, created: float = NOW, deadline: float = NOW + 60, attempts: int = 1, **limits: object
) -> NewJob:
    return NewJob(job_id, "mod.fn", b"payload", created, deadline, attempts, **limits)  # type: ignore[arg-type]


class TestJobStore:
    async def test_store_should_satisfy_the_protocol(self, backend, tmp_path):
        """Test that the backend is a pool.JobStore (structurally)."""
        async with opened(backend, tmp_path) as store:
            assert isinstance(store, pool.JobStore)

    async def test_submit_should_return_the_active_job_instead_of_a_second_one(self, backend, tmp_path):
        """Test idempotency: an active id attaches; a final one is replaced by a fresh job."""
        async with opened(backend, tmp_path) as store:
            first, created = await store.submit(job())
            assert created and (first.state, first.attempts, first.next_at, first.owner) == ("pending", 0, NOW, "")
            again, created = await store.submit(job(created=NOW + 5))
            assert not created and again == first
            await store.heartbeat("me", NOW, 10)
            (_leased,) = await store.lease("me", 10, NOW)
            assert await store.mark_running("a", "me", NOW)
            assert not (await store.submit(job(created=NOW + 6)))[1]  # running: still attaches
            assert await store.finish("a", "me", "succeeded", NOW + 1, outcome=b"out")
            fresh, created = await store.submit(job(created=NOW + 7))
            assert created and (fresh.state, fresh.attempts, fresh.outcome) == ("pending", 0, None)

    async def test_submit_should_refuse_past_max_active_in_the_same_transaction(self, backend, tmp_path):
        """Test the ceiling: active jobs count, final ones do not, an attach is never refused."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job("a"), max_active=2)
            await store.submit(job("b"), max_active=2)
            with pytest.raises(pool.AdmissionRejected, match="2 jobs already active"):
                await store.submit(job("c"), max_active=2)
            assert not (await store.submit(job("a"), max_active=2))[1]
            assert await store.cancel("b", NOW) is not None
            assert (await store.submit(job("c"), max_active=2))[1]
            assert await store.count_active() == 2

    async def test_lease_should_take_due_unowned_jobs_oldest_first_and_never_twice(self, backend, tmp_path):
        """Test lease order and exclusivity within one store."""
        async with opened(backend, tmp_path) as store:
            for i, created in enumerate([NOW + 3, NOW + 1, NOW + 2, NOW + 50]):
                await store.submit(job(f"j{i}", created=created))
            first = await store.lease("one", 2, NOW + 10)
            second = await store.lease("two", 10, NOW + 10)
            assert [j.id for j in first] == ["j1", "j2"] and {j.owner for j in first} == {"one"}
            assert [j.id for j in second] == ["j0"]  # j3 is not due yet
            await store.unlease("one", ["j1"])
            assert [j.id for j in await store.lease("two", 10, NOW + 60)] == ["j1", "j3"]

    async def test_lease_should_be_exclusive_across_two_stores_on_one_file(self, backend, tmp_path):
        """Test two stores (as two processes would) leasing concurrently from their own threads."""
        async with opened(backend, tmp_path) as one, opened(backend, tmp_path) as two:
            await asyncio.gather(*(one.submit(job(f"j{i}")) for i in range(300)))
            leased: dict[str, list[str]] = {"one": [], "two": []}

            async def drain(store: JobStore, owner: str) -> None:
                for _ in range(300):  # bounded: a lease that hands out jobs twice must not loop forever
                    batch = await store.lease(owner, 7, NOW)
                    if not batch:
                        return
                    leased[owner] += [j.id for j in batch]

            await asyncio.gather(drain(one, "one"), drain(two, "two"))
            assert not set(leased["one"]) & set(leased["two"])
            assert len(leased["one"]) + len(leased["two"]) == 300

    async def test_lease_should_hold_queue_key_and_workflow_limits_across_owners(self, backend, tmp_path):
        """Test that leases count what every owner holds: per key, per queue total, per workflow."""
        async with opened(backend, tmp_path) as store:
            for i in range(6):  # keys a, b, c twice each; queue total 2; concurrency 1 per key
                await store.submit(job(f"q{i}", created=NOW + i, queue="q", key="abc"[i % 3], concurrency=1, total=2))
            for i in range(3):
                await store.submit(job(f"w{i}", created=NOW + i, workflow="order-1"))
            await store.submit(job("free", created=NOW + 9))
            one = [j.id for j in await store.lease("one", 100, NOW + 10)]
            assert one == ["q0", "w0", "q1", "free"]  # two of the queue (total), one of the workflow, the free one
            assert await store.lease("two", 100, NOW + 10) == []  # nothing more fits, whoever asks
            await store.mark_running("q0", "one", NOW)
            await store.finish("q0", "one", "succeeded", NOW, outcome=None)
            assert [j.id for j in await store.lease("two", 100, NOW + 10)] == ["q2"]  # key c: a slot freed
            await store.unlease("one", ["w0"])  # given back: the workflow's next in line is w0 again
            assert [j.id for j in await store.lease("two", 100, NOW + 10)] == ["w0"]

    async def test_writes_should_be_fenced_on_owner_and_state(self, backend, tmp_path):
        """Test that a process that lost a job cannot move it."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job())
            await store.lease("me", 1, NOW)
            assert not await store.mark_running("a", "other", NOW)
            assert not await store.finish("a", "me", "succeeded", NOW, outcome=None)  # not running yet
            assert await store.mark_running("a", "me", NOW)
            assert not await store.finish("a", "other", "succeeded", NOW, outcome=None)  # not its owner
            assert not await store.mark_running("a", "me", NOW)  # not pending any more
            assert not await store.retry("a", "other", NOW, "x")
            assert not await store.fail_pending("a", "me", NOW, "x")
            assert await store.retry("a", "me", NOW + 5, "boom")
            record = await store.get("a")
            assert (record.state, record.owner, record.next_at, record.error, record.attempts) == (
                "pending",
                "",
                NOW + 5,
                "boom",
                1,
            )

    async def test_finish_with_started_should_record_an_attempt_that_ended_before_it_was_marked(
        self, backend, tmp_path
    ):
        """Test the one-write path: pending + owned -> final, attempts + 1, started_at set; fenced as ever."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job())
            await store.submit(job("b"))
            await store.lease("me", 2, NOW)
            assert not await store.finish("a", "other", "succeeded", NOW + 2, outcome=b"x", started=NOW + 1)
            assert await store.finish("a", "me", "succeeded", NOW + 2, outcome=b"x", started=NOW + 1)
            record = await store.get("a")
            assert (
                record.state,
                record.owner,
                record.attempts,
                record.started_at,
                record.finished_at,
                record.outcome,
            ) == (
                "succeeded",
                "",
                1,
                NOW + 1,
                NOW + 2,
                b"x",
            )
            assert not await store.finish("a", "me", "failed", NOW + 3, outcome=None, started=NOW + 1)  # final already
            assert await store.mark_running("b", "me", NOW + 1)  # marked: started only counts from pending
            assert await store.finish("b", "me", "failed", NOW + 2, outcome=None, error="e", started=NOW + 9)
            record = await store.get("b")
            assert (record.state, record.attempts, record.started_at) == ("failed", 1, NOW + 1)

    async def test_recover_should_requeue_only_the_jobs_of_dead_owners(self, backend, tmp_path):
        """Test orphan recovery: a live owner's jobs are never touched."""
        async with opened(backend, tmp_path) as store:
            for i, name in enumerate(("dead-run", "dead-wait", "live-run", "ghost")):
                await store.submit(job(name, created=NOW - 4 + i))  # leased in this order
            await store.heartbeat("dead", NOW, 5)
            await store.heartbeat("live", NOW, 60)
            await store.lease("dead", 2, NOW)  # dead-run, dead-wait
            await store.lease("live", 1, NOW)  # live-run
            await store.lease("never-heartbeat", 1, NOW)  # ghost: crashed before its first heartbeat
            assert await store.mark_running("dead-run", "dead", NOW)
            assert await store.mark_running("live-run", "live", NOW)
            assert await store.recover(NOW + 1) == []  # dead's lease is still valid
            assert await store.recover(NOW + 10) == ["dead-run"]
            states = {j.id: (j.state, j.owner, j.attempts) for j in await store.list()}
            assert states == {
                "dead-run": ("pending", "", 1),
                "dead-wait": ("pending", "", 0),
                "live-run": ("running", "live", 1),
                "ghost": ("pending", "", 0),
            }

    async def test_cancel_should_end_a_pending_job_and_flag_a_running_one(self, backend, tmp_path):
        """Test cancel in each state."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job("p"))
            await store.submit(job("r"))
            await store.lease("me", 2, NOW)
            await store.mark_running("r", "me", NOW)
            assert (await store.cancel("p", NOW)).state == "cancelled"
            assert not await store.mark_running("p", "me", NOW)  # a cancelled job never runs
            flagged = await store.cancel("r", NOW)
            assert flagged.state == "running" and flagged.cancel_requested
            assert await store.cancel_requested("me") == ["r"]
            assert await store.finish("r", "me", "cancelled", NOW, outcome=None, error="cancelled")
            assert (await store.cancel("r", NOW)).state == "cancelled"  # final: unchanged
            assert await store.cancel("nope", NOW) is None
            assert (await store.counts())["cancelled"] == 2

    async def test_release_owner_should_hand_back_everything_on_a_clean_shutdown(self, backend, tmp_path):
        """Test that a closing process leaves no job owned."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job("a"))
            await store.submit(job("b"))
            await store.heartbeat("me", NOW, 60)
            await store.lease("me", 2, NOW)
            await store.mark_running("a", "me", NOW)
            await store.release_owner("me", NOW + 1)
            assert {(j.state, j.owner) for j in await store.list()} == {("pending", "")}
            assert await store.oldest_due(NOW + 1) == NOW

    async def test_lease_should_take_higher_priority_first_and_fifo_within_a_priority(self, backend, tmp_path):
        """Test priority order among due jobs (free and limited alike); a job not yet due waits, whatever its priority."""
        async with opened(backend, tmp_path) as store:
            for job_id, created, priority in [("low0", 1, 0), ("high0", 2, 5), ("low1", 3, 0), ("high1", 4, 5)]:
                await store.submit(job(job_id, created=NOW + created, priority=priority))
            await store.submit(job("urgent-later", created=NOW, priority=9, next_at=NOW + 100))
            await store.submit(job("queued", created=NOW + 5, priority=7, queue="q", concurrency=1))
            await store.submit(job("neg", created=NOW, priority=-1))
            assert [j.id for j in await store.lease("one", 3, NOW + 10)] == ["queued", "high0", "high1"]
            assert [j.id for j in await store.lease("one", 100, NOW + 10)] == ["low0", "low1", "neg"]
            assert [j.id for j in await store.lease("one", 100, NOW + 100)] == ["urgent-later"]

    async def test_a_delayed_job_should_be_pending_and_unleasable_until_due(self, backend, tmp_path):
        """Test next_at at submit: pending, cancellable, leased only from its due time on."""
        async with opened(backend, tmp_path) as store:
            record, _ = await store.submit(job("later", next_at=NOW + 30))
            assert (record.state, record.next_at) == ("pending", NOW + 30)
            assert await store.lease("one", 10, NOW + 29.9) == []
            assert await store.oldest_due(NOW) == NOW + 30
            assert await store.next_due(NOW) == NOW + 30 and await store.next_due(NOW + 30) is None
            assert [j.id for j in await store.lease("one", 10, NOW + 30)] == ["later"]
            await store.submit(job("gone", next_at=NOW + 30))
            assert (await store.cancel("gone", NOW)).state == "cancelled"

    async def test_purge_should_delete_only_old_final_jobs_in_bounded_batches(self, backend, tmp_path):
        """Test retention's purge: final jobs ended before the cut, oldest first, at most `limit`; never an active one."""
        async with opened(backend, tmp_path) as store:
            await store.heartbeat("me", NOW, 1000)
            for i in range(5):
                await store.submit(job(f"done{i}"))
            await store.submit(job("pending"))
            await store.submit(job("delayed", next_at=NOW + 10_000))
            leased = {j.id for j in await store.lease("me", 100, NOW)}
            assert {"done0", "pending"} <= leased
            for i in range(5):
                await store.mark_running(f"done{i}", "me", NOW)
                await store.finish(f"done{i}", "me", "failed" if i % 2 else "succeeded", NOW + i, outcome=None)
            await store.unlease("me", ["pending"])
            await store.submit(job("running"))
            await store.lease("me", 100, NOW)
            await store.mark_running("running", "me", NOW)
            assert await store.purge(NOW + 3, 2) == 2  # done0, done1: the oldest first, two at most
            assert await store.purge(NOW + 3, 2) == 1  # done2 (ended at NOW + 2)
            assert await store.purge(NOW + 3, 2) == 0
            assert await store.purge(NOW + 1_000_000, 100) == 2
            assert sorted(j.id for j in await store.list()) == ["delayed", "pending", "running"]

    async def test_requeue_should_run_a_failed_job_again_and_keep_its_history(self, backend, tmp_path):
        """Test an operator's retry: failed/cancelled -> pending, due now, attempts and last error kept."""
        async with opened(backend, tmp_path) as store:
            await store.submit(job("f"))
            await store.lease("me", 1, NOW)
            await store.mark_running("f", "me", NOW)
            await store.finish("f", "me", "failed", NOW + 1, outcome=b"boom", error="ValueError: boom")
            again = await store.requeue("f", NOW + 100)
            assert (again.state, again.attempts, again.error, again.next_at) == (
                "pending",
                1,
                "ValueError: boom",
                NOW + 100,
            )
            assert again.max_attempts == 2 and again.finished_at is None and again.deadline > NOW + 100
            assert (await store.requeue("f", NOW + 101)).state == "pending"  # not final: left as it is
            assert await store.requeue("nope", NOW) is None
            (_leased,) = await store.lease("me", 1, NOW + 100)
            assert await store.mark_running("f", "me", NOW + 100)
            assert (await store.get("f")).attempts == 2

    async def test_select_should_filter_by_state_and_routine_newest_first(self, backend, tmp_path):
        """Test the jobs command's listing."""
        async with opened(backend, tmp_path) as store:
            for i, routine in enumerate(["a.f", "b.g", "a.f"]):
                await store.submit(NewJob(f"j{i}", routine, b"p", NOW + i, NOW + 60))
            await store.cancel("j2", NOW)
            assert [j.id for j in await store.select()] == ["j2", "j1", "j0"]
            assert [j.id for j in await store.select(routine="a.f")] == ["j2", "j0"]
            assert [j.id for j in await store.select(state="pending", routine="a.f")] == ["j0"]
            assert [j.id for j in await store.select(limit=1)] == ["j2"]

    async def test_open_should_migrate_a_store_written_by_the_previous_release(self, backend, tmp_path):
        """Test the upgrade: a version-1 store keeps its jobs, gains priority (0) and the new indexes, and works."""
        await write_v1_store(backend)
        async with opened(backend, tmp_path) as store:
            old = await store.get("old")
            assert (old.state, old.priority, old.routine) == ("pending", 0, "mod.fn")
            assert [j.id for j in await store.lease("me", 10, NOW)] == ["old"]
            await store.submit(job("new", priority=3))
            assert isinstance(store, MaintainedStore)
        async with opened(backend, tmp_path) as store:  # opening again: nothing to migrate
            assert (await store.get("new")).priority == 3


async def write_v1_store(backend: tuple[str, str]) -> None:
    """A store as the release before schema 2 wrote it, with one pending job."""
    kind, where = backend
    columns = "id, routine, state, max_attempts, created_at, deadline, next_at, payload"
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(where)) as db, db:
            db.execute("CREATE TABLE leakypool_schema (version INTEGER NOT NULL)")
            for statement in sqlite_schema._SCHEMA_V1:
                db.execute(statement)
            db.execute("INSERT INTO leakypool_schema VALUES (1)")
            db.execute(
                f"INSERT INTO jobs ({columns}) VALUES ('old', 'mod.fn', 'pending', 1, ?, ?, ?, x'00')",
                (NOW, NOW + 60, NOW),
            )
        return
    import asyncpg

    db = await asyncpg.connect(where)
    try:
        await db.execute("CREATE TABLE leakypool_schema (version INTEGER NOT NULL)")
        for statement in postgres_sql.SCHEMA_V1[1:]:
            await db.execute(statement)
        await db.execute("INSERT INTO leakypool_schema VALUES (1)")
        await db.execute(
            f"INSERT INTO leakypool_jobs ({columns}) VALUES ('old', 'mod.fn', 'pending', 1, $1, $2, $1, "
            "'\\x00'::bytea)",
            NOW,
            NOW + 60,
        )
    finally:
        await db.close()


class TestJobStoreList:
    async def test_list_should_give_oldest_first_or_newest_first(self, backend, tmp_path):
        """Test the two orders of `list` (the page shows the latest failed jobs: newest first)."""
        async with opened(backend, tmp_path) as store:
            for i, created in enumerate([NOW + 2, NOW + 1, NOW + 3]):
                await store.submit(job(f"j{i}", created=created))
            assert [j.id for j in await store.list()] == ["j1", "j0", "j2"]
            assert [j.id for j in await store.list("pending", 2, newest=True)] == ["j2", "j0"]
            assert await store.list("failed", newest=True) == []
