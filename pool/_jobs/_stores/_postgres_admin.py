"""The PostgreSQL store's schema upgrades, retention, an operator's verbs, and a submit in the caller's transaction.

Functions over an asyncpg pool or connection (the store translates their
errors); kept apart from `PostgresStore`'s hot path.
"""

from __future__ import annotations

from typing import Any, Final

from ..._errors import AdmissionRejected, ConfigError
from .._store import ACTIVE_STATES, NewJob
from . import _postgres_sql as sql


async def prepare(db: Any, where: str) -> None:
    """Create the schema, or migrate one written by an earlier release, in one transaction under a lock.

    Raises:
        ConfigError: a newer schema (the database left untouched).
    """
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", sql.LOCK_SCHEMA)
        if await db.fetchval("SELECT to_regclass('leakypool_schema')") is None:
            for statement in sql.SCHEMA_V1:
                await db.execute(statement)
            await db.execute("INSERT INTO leakypool_schema VALUES (1)")
        version = await db.fetchval("SELECT max(version) FROM leakypool_schema")
        if version > sql.SCHEMA_VERSION:
            raise ConfigError(
                f"store {where}: schema version {version} is newer than this release's "
                f"({sql.SCHEMA_VERSION}); upgrade leakypool (the database was left untouched)"
            )
        for step in range(version + 1, sql.SCHEMA_VERSION + 1):
            for statement in sql.MIGRATIONS[step]:
                await db.execute(statement)
            await db.execute("INSERT INTO leakypool_schema VALUES ($1)", step)


async def purge(pool: Any, finished_before: float, limit: int) -> int:
    """One bounded batch (see `MaintainedStore.purge`); 0 at once while another process purges."""
    async with pool.acquire() as db, db.transaction():
        if not await db.fetchval("SELECT pg_try_advisory_xact_lock($1)", sql.LOCK_PURGE):
            return 0
        status = await db.execute(sql.PURGE, finished_before, limit)
    return int(status.split()[-1])


COMMITTED: Final[str] = "-"
"""The sender of a notice sent inside a caller's transaction: every process hears it, the submitting one too
(its own wake-up came before the commit, when the job could not be seen yet)."""


async def submit_one(pool: Any, job: NewJob, max_active: int | None, owner: str) -> tuple[Any, bool]:
    """One job, or the active one with its id: under ``max_active`` (counted under a lock), or its id is taken.

    Raises:
        AdmissionRejected: ``max_active`` jobs are already active.
    """
    async with pool.acquire() as db, db.transaction():
        if max_active is not None:
            await db.execute("SELECT pg_advisory_xact_lock($1)", sql.LOCK_CEILING)
        row = await db.fetchrow(f"SELECT {sql.COLUMNS} FROM leakypool_jobs WHERE id = $1 FOR UPDATE", job.id)
        if row is not None and row[2] in ACTIVE_STATES:
            return row, False
        if max_active is not None:
            active = await db.fetchval("SELECT count(*) FROM leakypool_jobs WHERE state IN ('pending', 'running')")
            if active >= max_active:
                raise AdmissionRejected(
                    f"{job.routine}() refused: {active} jobs already active in the store (max_pending={max_active})",
                    retry_after=1.0,
                )
        if row is not None:
            await db.execute("DELETE FROM leakypool_jobs WHERE id = $1", job.id)
        return await db.fetchrow(sql.INSERT + " RETURNING " + sql.COLUMNS, *job.values(owner)), True


async def submit_in(connection: Any, job: NewJob) -> tuple[Any, bool]:
    """Insert ``job`` on the caller's ``connection``, in the transaction it is in: the row and whether it is new.

    The job exists if and only if that transaction commits; the notice is
    part of the transaction too, so PostgreSQL delivers it (waking the
    other processes) on commit, and never on a rollback.

    Raises:
        ConfigError: the connection is not inside a transaction (the job would commit alone).
    """
    if not connection.is_in_transaction():
        raise ConfigError(
            "connection: expected an asyncpg connection inside a transaction (async with conn.transaction()), "
            "got one outside any transaction"
        )
    row = await connection.fetchrow(
        sql.INSERT + " ON CONFLICT (id) DO NOTHING RETURNING " + sql.COLUMNS, *job.values("")
    )
    if row is None:
        existing = await connection.fetchrow(f"SELECT {sql.COLUMNS} FROM leakypool_jobs WHERE id = $1", job.id)
        if existing is not None and existing[2] in ("pending", "running"):
            return existing, False
        await connection.execute("DELETE FROM leakypool_jobs WHERE id = $1", job.id)  # a final job: replaced
        row = await connection.fetchrow(sql.INSERT + " RETURNING " + sql.COLUMNS, *job.values(""))
    await connection.execute(sql.NOTIFY, sql.CHANNEL, f"{COMMITTED} due")
    return row, True


async def schedule_slot(pool: Any, name: str, slot: float, job: NewJob | None) -> tuple[float | None, bool]:
    """See `MaintainedStore.schedule_slot`; also whether a job was inserted (to wake the others)."""
    async with pool.acquire() as db, db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1, hashtext($2))", sql.LOCK_SCHEDULE, name)
        previous = await db.fetchval("SELECT last_slot FROM leakypool_schedules WHERE name = $1", name)
        claim = job is not None and (previous is None or previous < slot)
        if claim or (job is None and previous is None):
            await db.execute(
                "INSERT INTO leakypool_schedules VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET last_slot = $2",
                name,
                slot,
            )
        inserted = False
        if claim:
            assert job is not None  # noqa: S101 - an invariant, stated for the type checker
            status = await db.execute(sql.INSERT + " ON CONFLICT (id) DO NOTHING", *job.values(""))
            inserted = status.endswith(" 1")
    return previous, inserted


async def count_rates(db: Any, leased: list[Any], now: float) -> None:
    """Inside the lease (under its lock): record the rate-limited leases, hold back what their rates leave out.

    ``leased`` are the `sql.LIMITED_DUE` rows this lease takes.
    """
    rated = [row for row in leased if row[6] > 0]
    if rated:
        await db.execute(
            sql.RECORD_STARTS,
            [r[4] for r in rated],
            [r[5] for r in rated],
            [now] * len(rated),
            [now + r[7] for r in rated],
            [r[0] for r in rated],
        )
        await db.execute("DELETE FROM leakypool_rate_starts WHERE expires < $1", now)
    await db.execute(sql.HELD_BACK, now)
