"""Tests for the PostgreSQL store's schema and statements (`pool._jobs._stores._postgres_sql`), on a real server.

The module is text, but text the server must accept and that must mean
what the store reads back: the migrations are a complete chain, every
statement plans against the schema they build, the column list matches
`JobRecord`, and the give-back of a lease returns the newest rate slot of
each rated job only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from pool._jobs import _store
from pool._jobs._store import JobRecord, NewJob
from pool._jobs._stores import _postgres_sql as sql
from pool._jobs._stores._pauses import PAUSED_TABLE

NOW = 1_000_000.0

VERBS = ("SELECT", "INSERT", "UPDATE", "DELETE", "WITH")


def statements() -> dict[str, str]:
    """The module's own complete statements by name (fragments such as `COLUMNS` and `DEAD`, and the templates
    it imports from `_store`, left out)."""
    return {
        name: value
        for name, value in vars(sql).items()
        if name.isupper()
        and not name.startswith("_")
        and not hasattr(_store, name)
        and isinstance(value, str)
        and value.lstrip().startswith(VERBS)
    }


@asynccontextmanager
async def schema_built(url: str) -> AsyncIterator[Any]:
    """A connection to ``url`` after `SCHEMA_V1` and every migration ran, in order, as the module gives them."""
    db = await asyncpg.connect(url)
    try:
        for statement in sql.SCHEMA_V1:
            await db.execute(statement)
        for step in range(2, sql.SCHEMA_VERSION + 1):
            for statement in sql.MIGRATIONS[step]:
                await db.execute(statement)
        await db.execute(PAUSED_TABLE)  # created on open, outside the migrations (`_pauses`)
        yield db
    finally:
        await db.close()


def job(job_id: str, **fields: Any) -> NewJob:
    return NewJob(job_id, "mod.fn", b"p", NOW, NOW + 60, **fields)


class TestSchema:
    def test_migrations_should_lead_from_version_one_to_the_current_version_without_a_gap(self):
        """Test that there is exactly one migration for each version after 1, up to `SCHEMA_VERSION`."""
        assert sorted(sql.MIGRATIONS) == list(range(2, sql.SCHEMA_VERSION + 1))
        assert all(sql.MIGRATIONS[step] for step in sql.MIGRATIONS)

    def test_columns_should_name_the_job_record_fields_in_their_order(self):
        """Test that `COLUMNS` reads back exactly what `JobRecord(*row)` takes, field by field."""
        assert [c.strip() for c in sql.COLUMNS.split(",")] == [f.name for f in dataclasses.fields(JobRecord)]

    async def test_every_statement_should_plan_against_the_schema_the_migrations_build(self, postgres_url):
        """Test that the server accepts each statement (parsed, names resolved, types checked) on the schema
        `SCHEMA_V1` and `MIGRATIONS` build: a misspelt column or a missing migration fails here."""
        async with schema_built(postgres_url) as db:
            found = statements()
            assert {"INSERT", "INSERT_MANY", "LIMITED_DUE", "UNLEASE", "REQUEUE", "PURGE"} <= set(found)
            refused = {}
            for name, statement in found.items():
                try:
                    await db.prepare(statement)
                except asyncpg.PostgresError as exc:
                    refused[name] = str(exc)
            assert refused == {}
            await db.prepare(sql.INSERT + " RETURNING " + sql.COLUMNS)  # as `_postgres_admin` completes it


class TestStatements:
    async def test_unlease_should_give_back_only_the_newest_rate_slot_of_each_rated_job(self, postgres_url):
        """Test `giving_back_rates` through `UNLEASE`: a rated job's lease (its newest start) is deleted, an
        earlier attempt's start stays counted, an unrated job's rows are untouched, and the ids come back."""
        async with schema_built(postgres_url) as db:
            for new in (job("rated", queue="q", key="k", concurrency=1, rate=5, rate_per=60.0), job("plain")):
                await db.execute(sql.INSERT, *new.values("me"))
            starts = [("rated", NOW - 30), ("rated", NOW), ("plain", NOW), ("other", NOW)]
            await db.execute(
                sql.RECORD_STARTS,
                ["q"] * len(starts),
                ["k"] * len(starts),
                [at for _, at in starts],
                [at + 60 for _, at in starts],
                [owner for owner, _ in starts],
            )

            back = await db.fetch(sql.UNLEASE, ["rated", "plain"], "me", None)

            assert sorted(row[0] for row in back) == ["plain", "rated"]
            left = await db.fetch("SELECT job, at FROM leakypool_rate_starts ORDER BY job, at")
            assert [tuple(r) for r in left] == [("other", NOW), ("plain", NOW), ("rated", NOW - 30)]
            assert {tuple(r) for r in await db.fetch("SELECT owner, next_at FROM leakypool_jobs")} == {("", NOW)}

    async def test_unlease_should_leave_jobs_of_another_owner_and_their_slots(self, postgres_url):
        """Test that the give-back is fenced on the owner: nothing of another owner's lease changes."""
        async with schema_built(postgres_url) as db:
            await db.execute(
                sql.INSERT, *job("r", queue="q", key="k", concurrency=1, rate=1, rate_per=9.0).values("me")
            )
            await db.execute(sql.RECORD_STARTS, ["q"], ["k"], [NOW], [NOW + 9], ["r"])
            assert await db.fetch(sql.UNLEASE, ["r"], "someone-else", NOW + 5) == []
            assert await db.fetchval("SELECT count(*) FROM leakypool_rate_starts") == 1
            assert tuple(await db.fetchrow("SELECT owner, next_at FROM leakypool_jobs")) == ("me", NOW)

    async def test_requeue_should_keep_the_dispatch_window_and_allow_one_more_attempt(self, postgres_url):
        """Test `REQUEUE` on a failed job: due at the given time, its deadline as far after as before (at least
        a second), one more attempt allowed; a job that is not final is left alone."""
        async with schema_built(postgres_url) as db:
            await db.execute(sql.INSERT, *job("wide").values(""))  # a 60 s window
            await db.execute(sql.INSERT, *NewJob("narrow", "mod.fn", b"p", NOW, NOW).values(""))  # none at all
            await db.execute(sql.INSERT, *job("pending").values(""))
            await db.execute("UPDATE leakypool_jobs SET state = 'failed', attempts = 1 WHERE id <> 'pending'")
            wide = await db.fetchrow(sql.REQUEUE, "wide", NOW + 500)
            narrow = await db.fetchrow(sql.REQUEUE, "narrow", NOW + 500)
            assert (wide["next_at"], wide["deadline"], wide["max_attempts"]) == (NOW + 500, NOW + 560, 2)
            assert narrow["deadline"] == NOW + 501
            assert await db.fetchrow(sql.REQUEUE, "pending", NOW + 500) is None

    async def test_next_due_should_give_the_earliest_due_time_strictly_after_now(self, postgres_url):
        """Test `NEXT_DUE`: a job already due or leased does not count; the soonest later unowned one does."""
        async with schema_built(postgres_url) as db:
            await db.execute(sql.INSERT, *job("due").values(""))
            await db.execute(sql.INSERT, *job("later", next_at=NOW + 30).values(""))
            await db.execute(sql.INSERT, *job("soon-but-leased", next_at=NOW + 10).values("me"))
            await db.execute(sql.INSERT, *job("latest", next_at=NOW + 40).values(""))
            assert await db.fetchval(sql.NEXT_DUE, NOW) == NOW + 30
            assert await db.fetchval(sql.NEXT_DUE, NOW + 40) is None
