"""`PostgresStore`: jobs in PostgreSQL, for dispatching processes on several hosts (asyncpg).

Same rows and the same fenced writes as the SQLite store; what changes is
how exclusivity is had: a lease is ``UPDATE ... WHERE id IN (SELECT ...
FOR UPDATE SKIP LOCKED)``, so two processes leasing at once take different
jobs without waiting on each other, and a submit under a ceiling takes a
transaction-scoped advisory lock so the active count it checks is exact
across processes. asyncpg is asyncio-native (no thread) and speaks the
binary protocol; it is imported only when a PostgreSQL store is used (the
``postgres`` extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .._errors import AdmissionRejected, ConfigError, StoreError
from ._store import ACTIVE_STATES, LIMITED_DUE_SQL, TERMINAL_STATES, JobRecord, NewJob

SCHEMA_VERSION: Final[int] = 1
"""The schema this release writes; a newer one is refused, untouched."""

CONNECT_TIMEOUT_S: Final[float] = 10.0
"""How long `PostgresStore.open` tries to reach the server."""

POOL_SIZE: Final[int] = 8
"""Connections one process keeps to the server."""

_LOCK_SCHEMA: Final[int] = 0x6C70_0001
"""Advisory lock key: one process creates or migrates the schema at a time."""

_LOCK_CEILING: Final[int] = 0x6C70_0002
"""Advisory lock key: submits under a ceiling count active jobs one at a time."""

_SCHEMA: Final[tuple[str, ...]] = (
    "CREATE TABLE leakypool_schema (version INTEGER NOT NULL)",
    """CREATE TABLE leakypool_jobs (
        id TEXT PRIMARY KEY,
        routine TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        deadline DOUBLE PRECISION NOT NULL,
        next_at DOUBLE PRECISION NOT NULL,
        owner TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        payload BYTEA NOT NULL,
        outcome BYTEA,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        queue TEXT NOT NULL DEFAULT '',
        key TEXT NOT NULL DEFAULT '',
        workflow TEXT NOT NULL DEFAULT '',
        concurrency INTEGER NOT NULL DEFAULT 0,
        total INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX leakypool_jobs_due ON leakypool_jobs (state, owner, next_at, created_at)",
    "CREATE INDEX leakypool_jobs_owned ON leakypool_jobs (owner) WHERE owner <> ''",
    "CREATE TABLE leakypool_owners (owner TEXT PRIMARY KEY, expires_at DOUBLE PRECISION NOT NULL)",
)

_COLUMNS: Final[str] = (
    "id, routine, state, attempts, max_attempts, created_at, started_at, finished_at, deadline, next_at, "
    "owner, error, payload, outcome, cancel_requested, queue, key, workflow"
)

_INSERT: Final[str] = (
    "INSERT INTO leakypool_jobs (id, routine, state, max_attempts, created_at, deadline, next_at, payload, queue, "
    "key, workflow, owner, concurrency, total) VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
)

_LOCK_LEASE: Final[int] = 0x6C70_0003
"""Advisory lock key: leases of jobs with limits count held slots one process at a time."""

_FREE_DUE: Final[str] = (
    "SELECT id, next_at, created_at FROM leakypool_jobs WHERE state = 'pending' AND owner = '' AND next_at <= $1 "
    "AND queue = '' AND workflow = '' ORDER BY next_at, created_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"
)
_ANY_LIMITED_DUE: Final[str] = (
    "SELECT EXISTS (SELECT 1 FROM leakypool_jobs WHERE state = 'pending' AND owner = '' AND next_at <= $1 "
    "AND (queue <> '' OR workflow <> ''))"
)
_LIMITED_DUE: Final[str] = LIMITED_DUE_SQL.format(table="leakypool_jobs", now="$1", limit="$2")

_DEAD: Final[str] = "owner <> '' AND owner NOT IN (SELECT owner FROM leakypool_owners WHERE expires_at >= $1)"


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

    @classmethod
    def from_url(cls, url: str) -> PostgresStore:
        """See the class."""
        return cls(url)

    def __repr__(self) -> str:
        return f"PostgresStore({_redacted(self.url)!r})"

    async def open(self) -> None:
        """Connect, create or check the schema.

        Raises:
            ConfigError: unreachable server, refused credentials, missing
                database, or a newer schema (one line, the password redacted).
        """
        if self._pool is not None:
            return
        try:
            import asyncpg
        except ImportError:
            raise ConfigError(
                "store: a postgresql:// store needs asyncpg: pip install 'leakypool[postgres]'"
            ) from None
        try:
            self._pool = await asyncpg.create_pool(
                self.url, min_size=1, max_size=POOL_SIZE, timeout=CONNECT_TIMEOUT_S, command_timeout=60
            )
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise ConfigError(f"store {_redacted(self.url)}: cannot connect: {_one_line(exc)}") from None
        try:
            async with self._pool.acquire() as db, db.transaction():
                await db.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_SCHEMA)
                if await db.fetchval("SELECT to_regclass('leakypool_schema')") is None:
                    for statement in _SCHEMA:
                        await db.execute(statement)
                    await db.execute("INSERT INTO leakypool_schema VALUES ($1)", SCHEMA_VERSION)
                version = await db.fetchval("SELECT max(version) FROM leakypool_schema")
                if version > SCHEMA_VERSION:
                    raise ConfigError(
                        f"store {_redacted(self.url)}: schema version {version} is newer than this release's "
                        f"({SCHEMA_VERSION}); upgrade leakypool (the database was left untouched)"
                    )
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        """Close the connections; idempotent."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _call(self, method: str, sql: str, *args: Any) -> Any:
        if self._pool is None:
            raise StoreError(f"store {_redacted(self.url)} is not open")
        try:
            return await getattr(self._pool, method)(sql, *args)
        except (OSError, ConnectionError) as exc:
            await self._reconnect()
            raise StoreError(f"store {_redacted(self.url)}: {_one_line(exc)}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("asyncpg"):
                await self._reconnect()
                raise StoreError(f"store {_redacted(self.url)}: {_one_line(exc)}") from exc
            raise

    async def _reconnect(self) -> None:
        """After a failure, let every pooled connection be replaced (a server restart breaks them all)."""
        if self._pool is not None:
            await self._pool.expire_connections()

    # -- reads -----------------------------------------------------------------------

    async def get(self, job_id: str) -> JobRecord | None:
        row = await self._call("fetchrow", f"SELECT {_COLUMNS} FROM leakypool_jobs WHERE id = $1", job_id)
        return None if row is None else _record(row)

    async def list(self, state: str | None = None, limit: int = 100) -> list[JobRecord]:
        if state is None:
            rows = await self._call(
                "fetch", f"SELECT {_COLUMNS} FROM leakypool_jobs ORDER BY created_at, id LIMIT $1", limit
            )
        else:
            rows = await self._call(
                "fetch",
                f"SELECT {_COLUMNS} FROM leakypool_jobs WHERE state = $1 ORDER BY created_at, id LIMIT $2",
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
        return await self._call(
            "fetchval", "SELECT count(*) FROM leakypool_jobs WHERE state IN ('pending', 'running')"
        )

    async def cancel_requested(self, owner: str) -> list[str]:
        rows = await self._call(
            "fetch",
            "SELECT id FROM leakypool_jobs WHERE state = 'running' AND owner = $1 AND cancel_requested",
            owner,
        )
        return [row[0] for row in rows]

    async def oldest_due(self, now: float) -> float | None:
        return await self._call(
            "fetchval", "SELECT min(next_at) FROM leakypool_jobs WHERE state = 'pending' AND owner = ''"
        )

    # -- writes ----------------------------------------------------------------------

    async def submit(self, job: NewJob, max_active: int | None = None, owner: str = "") -> tuple[JobRecord, bool]:
        values = (job.id, job.routine, job.max_attempts, job.created_at, job.deadline, job.created_at, job.payload,
                  job.queue, job.key, job.workflow, owner, job.concurrency, job.total)
        if max_active is None:
            row = await self._call("fetchrow", _INSERT + " ON CONFLICT (id) DO NOTHING RETURNING " + _COLUMNS, *values)
            if row is not None:
                return _record(row), True
        if self._pool is None:
            raise StoreError(f"store {_redacted(self.url)} is not open")
        try:
            async with self._pool.acquire() as db, db.transaction():
                if max_active is not None:
                    await db.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_CEILING)
                row = await db.fetchrow(f"SELECT {_COLUMNS} FROM leakypool_jobs WHERE id = $1 FOR UPDATE", job.id)
                if row is not None and row[2] in ACTIVE_STATES:
                    return _record(row), False
                if max_active is not None:
                    active = await db.fetchval(
                        "SELECT count(*) FROM leakypool_jobs WHERE state IN ('pending', 'running')"
                    )
                    if active >= max_active:
                        raise AdmissionRejected(
                            f"{job.routine}() refused: {active} jobs already active in the store "
                            f"(max_pending={max_active})",
                            retry_after=1.0,
                        )
                if row is not None:
                    await db.execute("DELETE FROM leakypool_jobs WHERE id = $1", job.id)
                return _record(await db.fetchrow(_INSERT + " RETURNING " + _COLUMNS, *values)), True
        except (AdmissionRejected, StoreError):
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("asyncpg") or isinstance(exc, OSError):
                raise StoreError(f"store {_redacted(self.url)}: {_one_line(exc)}") from exc
            raise

    async def lease(self, owner: str, limit: int, now: float) -> list[JobRecord]:
        """Due jobs, oldest first: any without limits (SKIP LOCKED), and those whose limits fit.

        Jobs with limits are counted against what every process holds, so
        those leases take a transaction-scoped advisory lock: two processes
        never count the same slot free. Jobs without limits need no lock.
        """
        if self._pool is None:
            raise StoreError(f"store {_redacted(self.url)} is not open")
        try:
            async with self._pool.acquire() as db, db.transaction():
                free = await db.fetch(_FREE_DUE, now, limit)
                limited = []
                if await db.fetchval(_ANY_LIMITED_DUE, now):
                    await db.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_LEASE)
                    limited = await db.fetch(_LIMITED_DUE, now, limit)
                chosen = sorted([tuple(r) for r in free] + [tuple(r) for r in limited], key=lambda r: (r[1], r[2], r[0]))
                ids = [r[0] for r in chosen[:limit]]
                rows = await db.fetch(
                    f"UPDATE leakypool_jobs SET owner = $1 WHERE id = ANY($2::text[]) AND owner = '' "
                    f"AND state = 'pending' RETURNING {_COLUMNS}",
                    owner,
                    ids,
                )
        except StoreError:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("asyncpg") or isinstance(exc, OSError):
                raise StoreError(f"store {_redacted(self.url)}: {_one_line(exc)}") from exc
            raise
        return sorted((_record(row) for row in rows), key=lambda r: (r.next_at, r.created_at, r.id))

    async def unlease(self, owner: str, ids: list[str], next_at: float | None = None) -> None:
        await self._call(
            "execute",
            "UPDATE leakypool_jobs SET owner = '', next_at = coalesce($3, next_at) "
            "WHERE id = ANY($1::text[]) AND owner = $2 AND state = 'pending'",
            list(ids),
            owner,
            next_at,
        )

    async def _fenced(self, sql: str, *args: Any) -> bool:
        return await self._call("execute", sql, *args) == "UPDATE 1"

    async def mark_running(self, job_id: str, owner: str, now: float) -> bool:
        return await self._fenced(
            "UPDATE leakypool_jobs SET state = 'running', attempts = attempts + 1, started_at = $3 "
            "WHERE id = $1 AND owner = $2 AND state = 'pending'",
            job_id, owner, now,
        )

    async def finish(
        self, job_id: str, owner: str, state: str, now: float, *, outcome: bytes | None, error: str = ""
    ) -> bool:
        if state not in TERMINAL_STATES:
            raise ValueError(f"state: expected one of {sorted(TERMINAL_STATES)}, got {state!r}")
        return await self._fenced(
            "UPDATE leakypool_jobs SET state = $3, finished_at = $4, outcome = $5, error = $6, owner = '' "
            "WHERE id = $1 AND owner = $2 AND state = 'running'",
            job_id, owner, state, now, outcome, error,
        )

    async def retry(self, job_id: str, owner: str, next_at: float, error: str) -> bool:
        return await self._fenced(
            "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $3, error = $4 "
            "WHERE id = $1 AND owner = $2 AND state = 'running'",
            job_id, owner, next_at, error,
        )

    async def fail_pending(
        self, job_id: str, owner: str, now: float, error: str, outcome: bytes | None = None
    ) -> bool:
        return await self._fenced(
            "UPDATE leakypool_jobs SET state = 'failed', finished_at = $3, error = $4, outcome = $5, owner = '' "
            "WHERE id = $1 AND owner = $2 AND state = 'pending'",
            job_id, owner, now, error, outcome,
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
            f"WHERE id = $1 RETURNING {_COLUMNS}",
            job_id,
            now,
        )
        return None if row is None else _record(row)

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        await self._call(
            "execute",
            "INSERT INTO leakypool_owners VALUES ($1, $2) ON CONFLICT (owner) DO UPDATE SET expires_at = $2",
            owner,
            now + ttl,
        )

    async def recover(self, now: float) -> list[str]:
        if self._pool is None:
            raise StoreError(f"store {_redacted(self.url)} is not open")
        async with self._pool.acquire() as db, db.transaction():
            rows = await db.fetch(
                f"UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $1, cancel_requested = FALSE "
                f"WHERE state = 'running' AND {_DEAD} RETURNING id",
                now,
            )
            await db.execute(f"UPDATE leakypool_jobs SET owner = '' WHERE state = 'pending' AND {_DEAD}", now)
            await db.execute("DELETE FROM leakypool_owners WHERE expires_at < $1", now)
        return [row[0] for row in rows]

    async def release_owner(self, owner: str, now: float) -> None:
        if self._pool is None:
            raise StoreError(f"store {_redacted(self.url)} is not open")
        async with self._pool.acquire() as db, db.transaction():
            await db.execute(
                "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $2, cancel_requested = FALSE "
                "WHERE state = 'running' AND owner = $1",
                owner,
                now,
            )
            await db.execute("UPDATE leakypool_jobs SET owner = '' WHERE state = 'pending' AND owner = $1", owner)
            await db.execute("DELETE FROM leakypool_owners WHERE owner = $1", owner)


def _redacted(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
