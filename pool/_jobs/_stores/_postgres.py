"""`PostgresStore`: jobs in PostgreSQL, for dispatching processes on several hosts (asyncpg).

Same rows and the same fenced writes as the SQLite store; what changes is
how exclusivity is had: a lease is ``UPDATE ... WHERE id IN (SELECT ...
FOR UPDATE SKIP LOCKED)``, so two processes leasing at once take different
jobs without waiting on each other, and a submit under a ceiling or a lease
of jobs with limits takes a transaction-scoped advisory lock, so the count
it checks is exact across processes. The hot writes (submit, mark running,
finish) are group committed (`BatchedWrites`). Processes wake each other with
LISTEN/NOTIFY (`watch`). asyncpg is imported only when a PostgreSQL store is used.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from ..._base import public
from ..._errors import ConfigError, StoreError
from .._store import ACTIVE_STATES, TERMINAL_STATES, JobRecord, NewJob
from . import _postgres_admin as admin
from . import _postgres_sql as sql
from ._pauses import POSTGRES_PAUSE, POSTGRES_PAUSED, POSTGRES_RESUME, create_paused_table
from ._postgres_batched import BatchedWrites
from ._postgres_link import CONNECT_TIMEOUT_S, GuardedPool, asyncpg_module, listen, one_line, redacted, translated
from ._retry import lost_connection
from ._strays import Strays, postgres_reconcile

_log = logging.getLogger("leakypool.jobs")

POOL_SIZE: Final[int] = 8
"""Connections one process keeps to the server."""

SCHEMA_VERSION: Final[int] = sql.SCHEMA_VERSION


def _record(row: Sequence[Any]) -> JobRecord:
    return JobRecord(*row)


class PostgresStore:
    """Jobs in a PostgreSQL database (``postgresql://user:password@host:port/db``).

    Tables are created on first use (``leakypool_jobs``, ``leakypool_owners``,
    ``leakypool_schema``), so any database the user may create tables in works.

    Args:
        url: A libpq-style URL; ``postgresql://`` or ``postgres://``.
    """

    def __init__(self, url: str) -> None:
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"store: expected postgresql://..., got {url!r}")
        self.url = url
        self._pool: Any = None
        self._token = uuid.uuid4().hex[:16]  # names this store's notices, so it ignores its own
        self._writes = BatchedWrites(self._call, self._notify, self._submit_one)  # the hot writes, group committed

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """See the class."""
        return cls(url)

    def __repr__(self) -> str:
        return f"PostgresStore({redacted(self.url)!r})"

    async def open(self) -> None:
        """Connect, create or check the schema.

        Raises:
            StoreError: the server is out of reach for now (refused, silent,
                starting up, shutting down, full): `lost_connection` says so,
                and ``store_retry`` tries again (`RetryingStore.open`).
            ConfigError: a store that cannot work: a bad URL, refused
                credentials, a missing database, or a newer schema (one
                line, the password redacted).
        """
        if self._pool is not None:
            return
        asyncpg = asyncpg_module()
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=POOL_SIZE, timeout=CONNECT_TIMEOUT_S, command_timeout=60
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            message = f"store {redacted(self.url)}: cannot connect: {one_line(exc)}"
            if lost_connection(exc):
                raise StoreError(message) from exc
            raise ConfigError(message) from None
        try:
            async with self._pool.acquire() as db:
                await admin.prepare(db, redacted(self.url))
                await create_paused_table(db)  # added after schema 1: created on open, no migration
        except BaseException as exc:
            await self.close()
            if isinstance(exc, Exception) and lost_connection(exc):  # it went away while the schema was checked
                raise StoreError(f"store {redacted(self.url)}: lost while opening: {one_line(exc)}") from exc
            raise

    async def close(self) -> None:
        """End the batched writes in flight, close the connections; idempotent."""
        try:
            await self._writes.aclose()
            self._writes = BatchedWrites(self._call, self._notify, self._submit_one)  # (a store may open again)
        finally:  # the connections are closed even if ending the writes failed or was cancelled
            pool, self._pool = self._pool, None
            if pool is not None:
                await pool.close()

    def _errors(self) -> contextlib.AbstractAsyncContextManager[None]:
        """asyncpg's and the network's errors as one `StoreError` line (the password redacted)."""
        return translated(self.url, self._pool)

    def _db(self) -> Any:
        if self._pool is None:
            raise StoreError(f"store {redacted(self.url)} is not open")
        return GuardedPool(self._pool)  # a broken connection is terminated, never handed out again

    async def _call(self, method: str, statement: str, *args: Any) -> Any:
        pool = self._db()
        async with self._errors():
            return await getattr(pool, method)(statement, *args)

    async def _notify(self, kind: str) -> None:
        """Tell the other processes (best effort: they also look at every tick)."""
        try:
            await self._call("execute", sql.NOTIFY, sql.CHANNEL, f"{self._token} {kind}")
        except StoreError as exc:
            _log.debug("could not notify other processes (%s): they see it at their next tick", exc)

    # -- reads -----------------------------------------------------------------------

    async def get(self, job_id: str) -> JobRecord | None:
        row = await self._call("fetchrow", f"SELECT {sql.COLUMNS} FROM leakypool_jobs WHERE id = $1", job_id)
        return None if row is None else _record(row)

    async def list(self, state: str | None = None, limit: int = 100, newest: bool = False) -> list[JobRecord]:
        order = "created_at DESC, id DESC" if newest else "created_at, id"
        if state is None:
            rows = await self._call(
                "fetch", f"SELECT {sql.COLUMNS} FROM leakypool_jobs ORDER BY {order} LIMIT $1", limit
            )
        else:
            rows = await self._call(
                "fetch",
                f"SELECT {sql.COLUMNS} FROM leakypool_jobs WHERE state = $1 ORDER BY {order} LIMIT $2",
                state,
                limit,
            )
        return [_record(row) for row in rows]

    async def counts(self) -> dict[str, int]:
        rows = await self._call("fetch", "SELECT state, count(*) FROM leakypool_jobs GROUP BY state")
        counts = dict.fromkeys(sorted(ACTIVE_STATES | TERMINAL_STATES), 0)
        counts.update({row[0]: row[1] for row in rows})
        return counts

    async def count_active(self) -> int:
        count: int = await self._call(
            "fetchval", "SELECT count(*) FROM leakypool_jobs WHERE state IN ('pending', 'running')"
        )
        return count

    async def cancel_requested(self, owner: str) -> builtins.list[str]:
        rows = await self._call(
            "fetch",
            "SELECT id FROM leakypool_jobs WHERE state = 'running' AND owner = $1 AND cancel_requested",
            owner,
        )
        return [row[0] for row in rows]

    async def oldest_due(self, now: float) -> float | None:
        oldest: float | None = await self._call(
            "fetchval", "SELECT min(next_at) FROM leakypool_jobs WHERE state = 'pending' AND owner = ''"
        )
        return oldest

    async def next_due(self, now: float) -> float | None:
        due: float | None = await self._call("fetchval", sql.NEXT_DUE, now)
        return due

    # -- writes (the hot three, group committed: `BatchedWrites`) -------------------------

    async def submit(self, job: NewJob, max_active: int | None = None, owner: str = "") -> tuple[JobRecord, bool]:
        """See `JobStore.submit`."""
        return await self._writes.submit(job, max_active, owner)

    def mark_running(self, job_id: str, owner: str, now: float) -> Awaitable[bool]:
        """See `JobStore.mark_running`."""
        return self._writes.mark_running(job_id, owner, now)

    def finish(
        self,
        job_id: str,
        owner: str,
        state: str,
        now: float,
        *,
        outcome: bytes | None,
        error: str = "",
        started: float | None = None,
    ) -> Awaitable[bool]:
        """See `JobStore.finish` (its batch's future: no coroutine of its own)."""
        return self._writes.finish(job_id, owner, state, now, outcome=outcome, error=error, started=started)

    async def _submit_one(self, job: NewJob, max_active: int | None, owner: str) -> tuple[JobRecord, bool]:
        async with self._errors():
            row, created = await admin.submit_one(self._db(), job, max_active, owner)
        return JobRecord(*row), created

    async def lease(self, owner: str, limit: int, now: float) -> builtins.list[JobRecord]:
        """Due jobs, oldest first: any without limits (SKIP LOCKED), and those whose limits fit.

        Jobs with limits are counted against what every process holds, so
        those leases take a transaction-scoped advisory lock: two processes
        never count the same slot free. Jobs without limits need no lock.
        """
        pool = self._db()
        async with self._errors(), pool.acquire() as db, db.transaction():
            free = await db.fetch(sql.FREE_DUE, now, limit)
            limited = []
            if checked := await db.fetchval(sql.ANY_LIMITED_DUE, now):
                await db.execute("SELECT pg_advisory_xact_lock($1)", sql.LOCK_LEASE)
                limited = await db.fetch(sql.LIMITED_DUE, now, limit)
            chosen = sorted(
                [tuple(r) for r in free] + [tuple(r) for r in limited], key=lambda r: (-r[3], r[1], r[2], r[0])
            )
            rows = await db.fetch(
                f"UPDATE leakypool_jobs SET owner = $1 WHERE id = ANY($2::text[]) AND owner = '' "
                f"AND state = 'pending' RETURNING {sql.COLUMNS}",
                owner,
                [r[0] for r in chosen[:limit]],
            )
            if checked:  # rate limits: count these leases, hold back what they leave no room for
                await admin.count_rates(db, [r for r in chosen[:limit] if len(r) > 4], now)
        return sorted((_record(row) for row in rows), key=lambda r: r.lease_order)

    async def unlease(self, owner: str, ids: builtins.list[str], next_at: float | None = None) -> None:
        await self._call("execute", sql.UNLEASE, list(ids), owner, next_at)
        await self._notify("due")

    async def _fenced(self, statement: str, *args: Any) -> bool:
        status: str = await self._call("execute", statement, *args)
        return status == "UPDATE 1"

    async def retry(self, job_id: str, owner: str, next_at: float, error: str) -> bool:
        retried = await self._fenced(
            "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $3, error = $4 "
            "WHERE id = $1 AND owner = $2 AND state = 'running'",
            job_id,
            owner,
            next_at,
            error,
        )
        if retried:
            await self._notify("due")
        return retried

    async def fail_pending(self, job_id: str, owner: str, now: float, error: str, outcome: bytes | None = None) -> bool:
        return await self._fenced(
            "UPDATE leakypool_jobs SET state = 'failed', finished_at = $3, error = $4, outcome = $5, owner = '' "
            "WHERE id = $1 AND owner = $2 AND state = 'pending'",
            job_id,
            owner,
            now,
            error,
            outcome,
        )

    async def cancel(self, job_id: str, now: float) -> JobRecord | None:
        row = await self._call(
            "fetchrow",
            f"UPDATE leakypool_jobs SET "
            f"state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END, "
            f"finished_at = CASE WHEN state = 'pending' THEN $2 ELSE finished_at END, "
            f"owner = CASE WHEN state = 'pending' THEN '' ELSE owner END, "
            f"error = CASE WHEN state = 'pending' THEN 'cancelled before it ran' ELSE error END, "
            f"cancel_requested = cancel_requested OR state = 'running' "
            f"WHERE id = $1 RETURNING {sql.COLUMNS}",
            job_id,
            now,
        )
        if row is None:
            return None
        record = _record(row)
        if record.state == "running":
            await self._notify(f"cancel {record.owner}")  # its owner cancels it now, not at its next tick
        return record

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        await self._call("execute", sql.HEARTBEAT, owner, now + ttl)

    async def recover(self, now: float) -> builtins.list[str]:
        pool = self._db()
        async with self._errors(), pool.acquire() as db, db.transaction():
            rows = await db.fetch(
                "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $1, cancel_requested = FALSE "
                f"WHERE state = 'running' AND {sql.DEAD} RETURNING id",
                now,
            )
            held = await db.fetch(sql.RECOVER_HELD, now)
            await db.execute("DELETE FROM leakypool_owners WHERE expires_at < $1", now)
        if rows or held:
            await self._notify("due")
        return [row[0] for row in rows]

    async def release_owner(self, owner: str, now: float) -> None:
        pool = self._db()
        async with self._errors(), pool.acquire() as db, db.transaction():
            await db.execute(
                "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $2, cancel_requested = FALSE "
                "WHERE state = 'running' AND owner = $1",
                owner,
                now,
            )
            await db.execute(sql.RELEASE_HELD, owner)
            await db.execute("DELETE FROM leakypool_owners WHERE owner = $1", owner)
        await self._notify("due")

    async def reconcile(self, owner: str, keep: builtins.list[str], now: float) -> Strays:
        """Give back ``owner``'s pending and running jobs other than ``keep`` (see `_strays`)."""
        async with self._errors(), self._db().acquire() as db:
            strays = await postgres_reconcile(db, owner, keep, now)
        if strays != ([], []):
            await self._notify("due")
        return strays

    # -- paused queues (`_pauses`) ---------------------------------------------------------

    async def pause(self, queue: str) -> None:
        """Lease no more of ``queue``'s pending jobs, in any process (they hear of it at once)."""
        await self._call("execute", POSTGRES_PAUSE, queue, time.time())
        await self._notify("pause")  # processes holding leased jobs of it give them back now

    async def resume(self, queue: str) -> None:
        """Lease ``queue``'s pending jobs again (the other processes lease them at once)."""
        await self._call("execute", POSTGRES_RESUME, queue, time.time())
        await self._notify("pause")
        await self._notify("due")

    async def paused(self) -> builtins.list[str]:
        """The paused queues' names, sorted."""
        return [row[0] for row in await self._call("fetch", POSTGRES_PAUSED)]

    # -- maintenance, and a submit in the caller's transaction ---------------------------

    async def purge(self, finished_before: float, limit: int) -> int:
        async with self._errors():
            return await admin.purge(self._db(), finished_before, limit)

    async def select(
        self, state: str | None = None, routine: str | None = None, limit: int = 100
    ) -> builtins.list[JobRecord]:
        return [_record(row) for row in await self._call("fetch", sql.SELECT, state, routine, limit)]

    async def schedule_slot(self, name: str, slot: float, job: NewJob | None) -> float | None:
        async with self._errors():
            previous, inserted = await admin.schedule_slot(self._db(), name, slot, job)
        if inserted:
            await self._notify("due")
        return previous

    async def reseal(self, job_id: str, payload: bytes, outcome: bytes | None, was: tuple[bytes, bytes | None]) -> bool:
        status = await self._call(
            "execute",
            "UPDATE leakypool_jobs SET payload = $2, outcome = $3 "
            "WHERE id = $1 AND payload = $4 AND outcome IS NOT DISTINCT FROM $5",
            job_id,
            payload,
            outcome,
            *was,
        )
        return bool(status == "UPDATE 1")

    async def requeue(self, job_id: str, now: float) -> JobRecord | None:
        row = await self._call("fetchrow", sql.REQUEUE, job_id, now)
        if row is None:
            return await self.get(job_id)
        await self._notify("due")
        return _record(row)

    async def submit_in(self, connection: Any, job: NewJob) -> tuple[JobRecord, bool]:
        """`submit` on the caller's asyncpg ``connection``, inside its transaction (see `admin.submit_in`)."""
        async with translated(self.url, None):
            row, created = await admin.submit_in(connection, job)
        return _record(row), created

    # -- notices ---------------------------------------------------------------------

    async def watch(self, notice: Callable[[str, str], None]) -> None:
        """Deliver other processes' notices until cancelled: ``("due", "")``, ``("cancel", owner)``.

        Listens on a connection of its own (LISTEN/NOTIFY). Calls
        ``notice("due", "")`` once listening, for what it may have missed.

        Raises:
            StoreError: the connection could not be made or was lost (call again).
        """
        await listen(self.url, self._token, notice)


public(PostgresStore)
