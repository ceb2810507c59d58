"""What the store says an owner holds that the owner does not: given back (both stores); an owner's give-backs.

A dispatching process holds in memory every job it leased or runs. The
store can disagree: a lease whose answer was lost (the connection broke
after the server committed it) leaves pending jobs owned by this process
that it does not know of, and a write reported failed though it committed
can leave a job running under this owner that no attempt runs (issue 40).
While the owner lives and renews its lease nobody else would touch them.
`reconcile` hands both back: pending jobs to the store as they were,
running ones pending again (their attempt counted: at least once). The
scheduler calls it on every lease tick and after a lease in doubt, once no
submission of its own is on its way in (`RetryingStore.lease_in_doubt`).
On SQLite, the other give-backs of an owner's jobs live here too: a dead
owner's (`sqlite_recover`) and a closing one's (`sqlite_release`).
"""

from __future__ import annotations

from typing import Any

from ._postgres_sql import REQUEUE_RUNNING_EXCEPT, UNLEASE_EXCEPT
from ._sqlite_schema import give_back_rates

Strays = tuple[list[str], list[str]]
"""What `reconcile` gave back: the pending jobs' ids, the running jobs' ids (pending again)."""


async def postgres_reconcile(db: Any, owner: str, keep: list[str], now: float) -> Strays:
    """`PostgresStore.reconcile` on an asyncpg connection of its pool, in one transaction."""
    async with db.transaction():
        pending = [row[0] for row in await db.fetch(UNLEASE_EXCEPT, owner, keep)]  # (their rate slots too)
        running = [row[0] for row in await db.fetch(REQUEUE_RUNNING_EXCEPT, owner, keep, now)]
    return pending, running


def sqlite_reconcile(db: Any, owner: str, keep: list[str], now: float) -> Strays:
    """`SQLiteStore.reconcile`, on its connection (in its write transaction)."""
    kept = set(keep)
    held = db.execute("SELECT id, state FROM jobs WHERE owner = ? AND state IN ('pending', 'running')", (owner,))
    strays = [(job_id, state) for job_id, state in held.fetchall() if job_id not in kept]
    given = [
        db.execute(
            "UPDATE jobs SET owner = '' WHERE id = ? AND owner = ? AND state = 'pending' RETURNING id, rate",
            (job_id, owner),
        ).fetchone()
        for job_id, state in strays
        if state == "pending"
    ]
    give_back_rates(db, [row for row in given if row is not None])
    running = [job_id for job_id, state in strays if state == "running"]
    db.executemany(
        "UPDATE jobs SET state = 'pending', owner = '', next_at = ?, cancel_requested = 0 "
        "WHERE id = ? AND owner = ? AND state = 'running'",
        [(now, job_id, owner) for job_id in running],
    )
    return [row[0] for row in given if row is not None], running


def sqlite_recover(db: Any, now: float) -> list[str]:
    """`SQLiteStore.recover`: dead owners' running jobs pending again (their ids), their pending ones given back."""
    dead = "owner != '' AND owner NOT IN (SELECT owner FROM owners WHERE expires_at >= ?)"
    revived = [
        row[0]
        for row in db.execute(
            f"UPDATE jobs SET state = 'pending', owner = '', next_at = ?, cancel_requested = 0 "
            f"WHERE state = 'running' AND {dead} RETURNING id",
            (now, now),
        )
    ]
    given = db.execute(f"UPDATE jobs SET owner = '' WHERE state = 'pending' AND {dead} RETURNING id, rate", (now,))
    give_back_rates(db, given.fetchall())
    db.execute("DELETE FROM owners WHERE expires_at < ?", (now,))
    return revived


def sqlite_release(db: Any, owner: str, now: float) -> None:
    """`SQLiteStore.release_owner`: all ``owner`` holds back to the store, and its lease gone (a clean close)."""
    db.execute(
        "UPDATE jobs SET state = 'pending', owner = '', next_at = ?, cancel_requested = 0 "
        "WHERE state = 'running' AND owner = ?",
        (now, owner),
    )
    given = db.execute("UPDATE jobs SET owner = '' WHERE state = 'pending' AND owner = ? RETURNING id, rate", (owner,))
    give_back_rates(db, given.fetchall())
    db.execute("DELETE FROM owners WHERE owner = ?", (owner,))
