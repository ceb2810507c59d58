"""Jobs a lease took but whose answer was lost: given back to the store (both stores).

A lease is one transaction; when the connection breaks after the server
committed it but before its answer arrived, the leased jobs are owned by
this process in the store yet unknown to it, so nothing would start them
while it lives. `unlease_except` gives back every pending job the owner
holds in the store but not in memory; the scheduler calls it, once no
submission of its own is on its way in (see `RetryingStore.lease_in_doubt`).
"""

from __future__ import annotations

from typing import Any

from ._postgres_sql import UNLEASE_EXCEPT
from ._sqlite_schema import give_back_rates


class PostgresStrays:
    """`PostgresStore.unlease_except` (mixed in; uses its ``_call`` and ``_notify``)."""

    async def unlease_except(self, owner: str, keep: list[str]) -> list[str]:
        """Give back ``owner``'s pending jobs other than ``keep``; their ids."""
        store: Any = self
        rows = await store._call("fetch", UNLEASE_EXCEPT, owner, list(keep))  # (their rate slots too)
        if rows:
            await store._notify("due")
        return [row[0] for row in rows]


class SQLiteStrays:
    """`SQLiteStore.unlease_except` (mixed in; uses its ``_run``)."""

    async def unlease_except(self, owner: str, keep: list[str]) -> list[str]:
        """Give back ``owner``'s pending jobs other than ``keep``; their ids."""
        store: Any = self
        kept = set(keep)

        def op(db: Any) -> list[str]:
            held = [row[0] for row in db.execute("SELECT id FROM jobs WHERE owner = ? AND state = 'pending'", (owner,))]
            strays = [job_id for job_id in held if job_id not in kept]
            given = [
                db.execute(
                    "UPDATE jobs SET owner = '' WHERE id = ? AND owner = ? AND state = 'pending' RETURNING id, rate",
                    (job_id, owner),
                ).fetchone()
                for job_id in strays
            ]
            give_back_rates(db, [row for row in given if row is not None])
            return strays

        return await store._run(op, write=True)
