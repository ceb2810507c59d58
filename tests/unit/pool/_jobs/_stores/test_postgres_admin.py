"""Tests for the PostgreSQL store's admin functions (`pool._jobs._stores._postgres_admin`), on a real server.

Each test calls the functions on an asyncpg pool (or connection) of its own
database, as `PostgresStore` does, without the store around them: schema
creation and migration under the lock, purge's skip while another process
purges, the ceiling counted under a lock, a submit in the caller's
transaction, and a schedule's slot claimed once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

import pool
from pool._jobs._store import NewJob
from pool._jobs._stores import _postgres_admin as admin
from pool._jobs._stores import _postgres_sql as sql

NOW = 1_000_000.0
WAIT_S = 30.0
"""Bound on every wait for a notice (one arrives in milliseconds)."""


def job(job_id: str = "a", **fields: Any) -> NewJob:
    return NewJob(job_id, "mod.fn", b"payload", NOW, NOW + 60, **fields)


@contextlib.asynccontextmanager
async def connected(url: str, *, prepared: bool = True, size: int = 4) -> AsyncIterator[Any]:
    """An asyncpg pool on ``url`` (the schema prepared unless told not to); closed after."""
    db_pool = await asyncpg.create_pool(url, min_size=1, max_size=size)
    try:
        if prepared:
            async with db_pool.acquire() as db:
                await admin.prepare(db, "the test's database")
        yield db_pool
    finally:
        await db_pool.close()


async def versions(db_pool: Any) -> list[int]:
    return [row[0] for row in await db_pool.fetch("SELECT version FROM leakypool_schema ORDER BY version")]


async def finished(db_pool: Any, job_id: str, at: float, state: str = "succeeded") -> None:
    """Insert ``job_id`` and end it at ``at`` (as the store's finish would)."""
    await db_pool.execute(sql.INSERT, *job(job_id).values(""))
    await db_pool.execute("UPDATE leakypool_jobs SET state = $2, finished_at = $3 WHERE id = $1", job_id, state, at)


class TestPrepare:
    async def test_prepare_should_create_the_current_schema_when_the_database_is_empty(self, postgres_url):
        """Test that an empty database gets version 1 and every migration after it, each recorded once."""
        async with connected(postgres_url, prepared=False) as db_pool:
            async with db_pool.acquire() as db:
                await admin.prepare(db, "here")
                await admin.prepare(db, "here")  # again: nothing to do
            assert await versions(db_pool) == list(range(1, sql.SCHEMA_VERSION + 1))
            columns = {
                row[0]
                for row in await db_pool.fetch(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = 'leakypool_rate_starts'"
                )
            }
            assert columns == {"queue", "key", "at", "expires", "job"}  # schema 3's column is there

    async def test_prepare_should_let_one_process_create_the_schema_when_several_open_at_once(self, postgres_url):
        """Test that concurrent first opens (one connection each, as separate processes) all succeed, and
        the schema is created and migrated once: the advisory lock makes them take turns."""
        async with connected(postgres_url, prepared=False, size=6) as db_pool:

            async def open_one() -> None:
                async with db_pool.acquire() as db:
                    await admin.prepare(db, "here")

            await asyncio.gather(*(open_one() for _ in range(6)))
            assert await versions(db_pool) == list(range(1, sql.SCHEMA_VERSION + 1))

    async def test_prepare_should_migrate_step_by_step_when_the_schema_is_older(self, postgres_url):
        """Test that a version-2 database gets only migration 3, in the same call, and keeps its rows."""
        async with connected(postgres_url, prepared=False) as db_pool:
            async with db_pool.acquire() as db, db.transaction():
                for statement in sql.SCHEMA_V1:
                    await db.execute(statement)
                for statement in sql.MIGRATIONS[2]:
                    await db.execute(statement)
                await db.execute("INSERT INTO leakypool_schema VALUES (1), (2)")
                await db.execute("INSERT INTO leakypool_rate_starts (queue, key, at, expires) VALUES ('q', 'k', 1, 2)")
            async with db_pool.acquire() as db:
                await admin.prepare(db, "here")
            assert await versions(db_pool) == [1, 2, 3]
            assert [tuple(r) for r in await db_pool.fetch("SELECT queue, job FROM leakypool_rate_starts")] == [
                ("q", "")
            ]

    async def test_prepare_should_refuse_a_newer_schema_naming_where_and_change_nothing(self, postgres_url):
        """Test that a schema newer than this release raises a ConfigError naming ``where``, and the
        transaction it ran in leaves the database as it was."""
        async with connected(postgres_url) as db_pool:
            await db_pool.execute("INSERT INTO leakypool_schema VALUES ($1)", sql.SCHEMA_VERSION + 1)
            async with db_pool.acquire() as db:
                with pytest.raises(pool.ConfigError, match=f"store db-here: schema version {sql.SCHEMA_VERSION + 1}"):
                    await admin.prepare(db, "db-here")
                assert not db.is_in_transaction()
            assert await versions(db_pool) == [*range(1, sql.SCHEMA_VERSION + 1), sql.SCHEMA_VERSION + 1]


class TestPurge:
    async def test_purge_should_delete_a_bounded_batch_and_say_how_many(self, postgres_url):
        """Test that purge deletes at most ``limit`` final jobs ended before the cut, oldest first."""
        async with connected(postgres_url) as db_pool:
            for i in range(4):
                await finished(db_pool, f"done{i}", NOW + i)
            assert await admin.purge(db_pool, NOW + 3, 2) == 2
            remaining = [r[0] for r in await db_pool.fetch("SELECT id FROM leakypool_jobs ORDER BY id")]
            assert remaining == ["done2", "done3"]

    async def test_purge_should_return_zero_at_once_when_another_process_purges(self, postgres_url):
        """Test that a purge finding the purge lock held deletes nothing and does not wait for it."""
        async with connected(postgres_url) as db_pool:
            await finished(db_pool, "old", NOW)
            async with db_pool.acquire() as other, other.transaction():
                await other.execute("SELECT pg_advisory_xact_lock($1)", sql.LOCK_PURGE)  # another process purging
                assert await asyncio.wait_for(admin.purge(db_pool, NOW + 10, 100), WAIT_S) == 0
            assert await admin.purge(db_pool, NOW + 10, 100) == 1  # its turn, once the other is done


class TestSubmitOne:
    async def test_submit_one_should_admit_exactly_max_active_when_many_submit_at_once(self, postgres_url):
        """Test that concurrent submits under a ceiling, on separate connections, are counted one at a time:
        exactly ``max_active`` are created and the rest rejected."""
        async with connected(postgres_url, size=8) as db_pool:
            outcomes = await asyncio.gather(
                *(admin.submit_one(db_pool, job(f"j{i}"), 3, "") for i in range(12)), return_exceptions=True
            )
            created = [o for o in outcomes if isinstance(o, tuple)]
            rejected = [o for o in outcomes if isinstance(o, pool.AdmissionRejected)]
            assert (len(created), len(rejected)) == (3, 9)
            assert "3 jobs already active in the store (max_pending=3)" in str(rejected[0])
            assert await db_pool.fetchval("SELECT count(*) FROM leakypool_jobs") == 3

    async def test_submit_one_should_return_the_active_job_and_replace_a_final_one(self, postgres_url):
        """Test idempotency on the one-row path: an active id attaches (even at the ceiling); a final one is
        deleted and inserted afresh, with the owner given."""
        async with connected(postgres_url) as db_pool:
            first, created = await admin.submit_one(db_pool, job("a"), 1, "me")
            assert created and (first[0], first[2], first[10]) == ("a", "pending", "me")
            again, created = await admin.submit_one(db_pool, job("a", priority=5), 1, "")
            assert not created and tuple(again) == tuple(first)
            await db_pool.execute("UPDATE leakypool_jobs SET state = 'failed', attempts = 1 WHERE id = 'a'")
            fresh, created = await admin.submit_one(db_pool, job("a", priority=5), 1, "")
            assert created and (fresh[2], fresh[3], fresh[10], fresh[18]) == ("pending", 0, "", 5)


class TestSubmitIn:
    async def test_submit_in_should_refuse_a_connection_outside_a_transaction(self, postgres_url):
        async with connected(postgres_url) as db_pool, db_pool.acquire() as db:
            with pytest.raises(pool.ConfigError, match="outside any transaction"):
                await admin.submit_in(db, job())
            assert await db.fetchval("SELECT count(*) FROM leakypool_jobs") == 0

    async def test_submit_in_should_insert_and_notify_only_when_the_transaction_commits(self, postgres_url):
        """Test that a rolled-back submit leaves no job and wakes nobody; a committed one is seen by a
        listener with the committed sender (every process, the submitting one too, acts on it)."""
        heard: asyncio.Queue[str] = asyncio.Queue()
        listener = await asyncpg.connect(postgres_url)
        try:
            await listener.add_listener(sql.CHANNEL, lambda *args: heard.put_nowait(args[-1]))
            async with connected(postgres_url) as db_pool, db_pool.acquire() as db:
                with contextlib.suppress(RuntimeError):
                    async with db.transaction():
                        await admin.submit_in(db, job("rolled-back"))
                        raise RuntimeError("the caller's transaction fails")
                async with db.transaction():
                    row, created = await admin.submit_in(db, job("committed"))
                assert created and (row[0], row[2], row[10]) == ("committed", "pending", "")
                assert [r[0] for r in await db.fetch("SELECT id FROM leakypool_jobs")] == ["committed"]
            assert await asyncio.wait_for(heard.get(), WAIT_S) == f"{admin.COMMITTED} due"
            await listener.execute("SELECT pg_notify($1, 'marker')", sql.CHANNEL)  # after every notice before it
            assert await asyncio.wait_for(heard.get(), WAIT_S) == "marker"  # none came from the rolled-back one
        finally:
            await listener.close()

    async def test_submit_in_should_attach_to_an_active_job_and_replace_a_final_one(self, postgres_url):
        async with connected(postgres_url) as db_pool, db_pool.acquire() as db:
            async with db.transaction():
                first, _ = await admin.submit_in(db, job("a"))
            async with db.transaction():
                again, created = await admin.submit_in(db, job("a", priority=9))
            assert not created and tuple(again) == tuple(first)
            await db.execute("UPDATE leakypool_jobs SET state = 'succeeded', attempts = 1 WHERE id = 'a'")
            async with db.transaction():
                fresh, created = await admin.submit_in(db, job("a", priority=9))
            assert created and (fresh[2], fresh[3], fresh[18]) == ("pending", 0, 9)
            assert await db.fetchval("SELECT count(*) FROM leakypool_jobs") == 1


class TestScheduleSlot:
    async def test_schedule_slot_should_claim_each_slot_once_and_only_a_later_one(self, postgres_url):
        """Test the slot record: a first look without a job records the slot and inserts nothing; a later
        slot with a job is claimed and its job inserted; the same or an earlier slot is not."""
        async with connected(postgres_url) as db_pool:
            assert await admin.schedule_slot(db_pool, "s", 60.0, None) == (None, False)
            assert await admin.schedule_slot(db_pool, "s", 120.0, None) == (60.0, False)  # a look changes nothing
            assert await admin.schedule_slot(db_pool, "s", 120.0, job("s@120")) == (60.0, True)
            assert await admin.schedule_slot(db_pool, "s", 120.0, job("s@120b")) == (120.0, False)
            assert await admin.schedule_slot(db_pool, "s", 90.0, job("s@90")) == (120.0, False)
            assert await admin.schedule_slot(db_pool, "other", 90.0, job("o@90")) == (None, True)
            assert sorted(r[0] for r in await db_pool.fetch("SELECT id FROM leakypool_jobs")) == ["o@90", "s@120"]

    async def test_schedule_slot_should_insert_one_job_when_processes_claim_the_same_slot(self, postgres_url):
        """Test that concurrent claims of one slot, with different job ids, insert exactly one job."""
        async with connected(postgres_url, size=6) as db_pool:
            outcomes = await asyncio.gather(
                *(admin.schedule_slot(db_pool, "s", 60.0, job(f"s@60-{i}")) for i in range(6))
            )
            assert sorted(inserted for _, inserted in outcomes) == [False] * 5 + [True]
            assert await db_pool.fetchval("SELECT count(*) FROM leakypool_jobs") == 1

    async def test_schedule_slot_should_not_insert_a_job_whose_id_exists(self, postgres_url):
        """Test that a claimed slot whose job id is taken records the slot but says nothing was inserted."""
        async with connected(postgres_url) as db_pool:
            await db_pool.execute(sql.INSERT, *job("s@60").values(""))
            assert await admin.schedule_slot(db_pool, "s", 60.0, job("s@60")) == (None, False)
            assert await db_pool.fetchval("SELECT last_slot FROM leakypool_schedules WHERE name = 's'") == 60.0


class TestCountRates:
    async def test_count_rates_should_record_rated_leases_drop_expired_ones_and_hold_back_the_rest(self, postgres_url):
        """Test one lease's rate bookkeeping: a start recorded per rated job (none for an unrated one), starts
        past their expiry deleted, and a due job of a full rate pushed to when its window frees."""
        async with connected(postgres_url) as db_pool:
            rated = job("r1", queue="q", key="k", concurrency=5, rate=2, rate_per=10.0)
            waiting = job("r2", queue="q", key="k", concurrency=5, rate=2, rate_per=10.0)
            for new in (rated, waiting):
                await db_pool.execute(sql.INSERT, *new.values(""))
            await db_pool.execute(sql.RECORD_STARTS, ["q"], ["k"], [NOW - 1], [NOW + 9], ["earlier"])
            await db_pool.execute(sql.RECORD_STARTS, ["q"], ["gone"], [NOW - 20], [NOW - 10], ["expired"])
            leased = [
                ("r1", NOW, NOW, 0, "q", "k", 2, 10.0),  # the LIMITED_DUE row of the job this lease takes
                ("free", NOW, NOW, 0, "q2", "", 0, 0.0),  # no rate: nothing to record
            ]
            await db_pool.execute("UPDATE leakypool_jobs SET owner = 'me' WHERE id = 'r1'")
            async with db_pool.acquire() as db, db.transaction():
                await admin.count_rates(db, leased, NOW)
            starts = await db_pool.fetch("SELECT queue, key, at, expires, job FROM leakypool_rate_starts ORDER BY at")
            assert [tuple(s) for s in starts] == [
                ("q", "k", NOW - 1, NOW + 9, "earlier"),
                ("q", "k", NOW, NOW + 10, "r1"),
            ]
            assert await db_pool.fetchval("SELECT next_at FROM leakypool_jobs WHERE id = 'r2'") == NOW - 1 + 10.0
