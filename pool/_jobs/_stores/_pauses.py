"""Paused queues, kept in the store (one row per paused queue), for both stores.

A paused queue's pending jobs are skipped by every process's lease (one
condition in `LIMITED_DUE_SQL`: only jobs of a queue can be paused, and
those are always leased through the limit check); submissions are still
accepted and running jobs finish. The table is created on open if missing,
so a store made by an older release gains it without a migration; the jobs
table is untouched.

Time spent paused does not count against a job's dispatch deadline: the
resume that deletes a queue's row pushes the deadline of its pending jobs
that were due by then on by the time they spent paused (from the pause, or
from when they fell due if later), in the same statement, so a resume
retried after a lost answer finds no row and shifts nothing twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import sqlite3

PAUSED_TABLE: Final[str] = (
    "CREATE TABLE IF NOT EXISTS leakypool_paused (queue TEXT PRIMARY KEY, paused_at DOUBLE PRECISION NOT NULL)"
)
"""The paused queues (the same text for SQLite and PostgreSQL)."""

POSTGRES_PAUSE: Final[str] = "INSERT INTO leakypool_paused VALUES ($1, $2) ON CONFLICT (queue) DO NOTHING"
"""Pause a queue (again: no change)."""

POSTGRES_PAUSED: Final[str] = "SELECT queue FROM leakypool_paused ORDER BY queue"
"""The paused queues' names, sorted."""

POSTGRES_RESUME: Final[str] = (
    "WITH gone AS (DELETE FROM leakypool_paused WHERE queue = $1 RETURNING paused_at) "
    "UPDATE leakypool_jobs SET deadline = deadline + ($2 - greatest(gone.paused_at, next_at)) "
    "FROM gone WHERE queue = $1 AND state = 'pending' AND next_at < $2"
)
"""Resume a queue: delete its row and push its pending jobs' deadlines on by the time each spent paused."""

_SQLITE_SHIFT: Final[str] = (
    "UPDATE jobs SET deadline = deadline + (:now - max(:paused_at, next_at)) "
    "WHERE queue = :queue AND state = 'pending' AND next_at < :now"
)
"""The same push on SQLite, after its own DELETE ... RETURNING (one transaction)."""


async def create_paused_table(db: Any) -> None:
    """Create the paused-queues table on a PostgreSQL connection if missing, under the schema lock.

    (Two processes creating it at once would otherwise race: ``IF NOT EXISTS`` is not atomic there.)
    Where it exists nothing is run but a lookup, so a role without the CREATE privilege, on a
    database its owner set up, opens the store.
    """
    from ._postgres_sql import LOCK_SCHEMA

    if await db.fetchval("SELECT to_regclass('leakypool_paused')") is not None:
        return
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock($1)", LOCK_SCHEMA)
        await db.execute(PAUSED_TABLE)


def sqlite_pause(db: sqlite3.Connection, queue: str, now: float) -> None:
    """`SQLiteStore.pause`, on its connection."""
    db.execute("INSERT INTO leakypool_paused VALUES (?, ?) ON CONFLICT (queue) DO NOTHING", (queue, now))


def sqlite_resume(db: sqlite3.Connection, queue: str, now: float) -> None:
    """`SQLiteStore.resume`, on its connection: the row deleted, the deadlines pushed on, in one transaction."""
    row = db.execute("DELETE FROM leakypool_paused WHERE queue = ? RETURNING paused_at", (queue,)).fetchone()
    if row is not None:
        db.execute(_SQLITE_SHIFT, {"now": now, "paused_at": row[0], "queue": queue})


def sqlite_paused(db: sqlite3.Connection) -> list[str]:
    """`SQLiteStore.paused`, on its connection."""
    return [row[0] for row in db.execute("SELECT queue FROM leakypool_paused ORDER BY queue")]
