"""The worker registry table, in PostgreSQL or SQLite: both sides of `StoreDiscovery` speak through it.

One row per worker: its uid, its record (`record_to_json`, the same JSON
the local registry directory holds) and when the row expires unless the
worker refreshes it. A worker upserts its row every third of its TTL and
deletes it when it drains; readers ignore (and delete) expired rows.

- PostgreSQL (asyncpg, the ``postgres`` extra, imported on first use): the
  expiry is the server's clock (``now()``), so hosts need not agree on
  time; an insert or a delete sends ``NOTIFY leakypool_workers`` so pools
  learn of arrivals and departures at once.
- SQLite (one host): the expiry is this host's wall clock; readers poll
  ``PRAGMA data_version``, which changes when another connection commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

from .._errors import ConfigError, StoreError

CHANNEL: Final[str] = "leakypool_workers"
"""The PostgreSQL NOTIFY channel for arrivals and departures."""

CONNECT_TIMEOUT_S: Final[float] = 10.0
"""How long a connection attempt to the registry may take."""

SQLITE_BUSY_S: Final[float] = 5.0
"""How long an SQLite statement waits for another writer's lock."""

DATA_VERSION_POLL_S: Final[float] = 0.1
"""How often an SQLite reader checks ``PRAGMA data_version`` (one cheap read; no table scan)."""

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS leakypool_workers (
    uid text PRIMARY KEY,
    record text NOT NULL,
    expires_at timestamptz NOT NULL
)"""

_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS leakypool_workers (
    uid TEXT PRIMARY KEY,
    record TEXT NOT NULL,
    expires_at REAL NOT NULL
)"""


class Registry(Protocol):
    """A connection to the registry table."""

    async def put(self, uid: str, record: str, ttl: float) -> None:
        """Record (or refresh) a worker's row for ``ttl`` more seconds."""
        ...

    async def remove(self, uid: str) -> None:
        """Delete a worker's row."""
        ...

    async def live(self) -> dict[str, str]:
        """Rows not expired, uid -> record (expired ones are deleted)."""
        ...

    async def listen(self, changed: Callable[[], None]) -> None:
        """From now on, call ``changed`` whenever the table may have changed (while `watch` runs, on SQLite)."""
        ...

    async def watch(self) -> None:
        """Run until cancelled, or raise `StoreError` once the connection is lost."""
        ...

    async def close(self) -> None:
        """Close the connection."""
        ...


def redacted(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


async def connect(url: str) -> Registry:
    """A connection to the registry at ``url`` (the table made if missing).

    Raises:
        ConfigError: not a registry URL, or asyncpg missing for PostgreSQL.
        StoreError: the store cannot be reached (one line, no password).
    """
    if url.startswith("sqlite:///"):
        return _Sqlite.open(url.removeprefix("sqlite://"))
    if url.startswith(("postgresql://", "postgres://")):
        return await _Postgres.open(url)
    raise ConfigError(f"registry: expected postgresql://... or sqlite:///PATH, got {redacted(url)!r}")


class _Postgres:
    def __init__(self, url: str, connection: Any) -> None:
        self._url = url
        self._connection = connection
        self._lost = asyncio.Event()

    @classmethod
    async def open(cls, url: str) -> _Postgres:
        try:
            import asyncpg
        except ImportError:
            raise ConfigError(
                "registry: a postgresql:// registry needs asyncpg: pip install 'leakypool[postgres]'"
            ) from None
        try:
            connection = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_S)
            async with connection.transaction():  # one creator at a time: CREATE IF NOT EXISTS races otherwise
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext('leakypool_workers'))")
                await connection.execute(_PG_SCHEMA)
        except Exception as exc:
            raise _error(url, exc) from exc
        return cls(url, connection)

    async def _run(self, query: str, *args: Any) -> Any:
        try:
            return await self._connection.fetch(query, *args, timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:
            raise _error(self._url, exc) from exc

    async def put(self, uid: str, record: str, ttl: float) -> None:
        rows = await self._run(
            "INSERT INTO leakypool_workers (uid, record, expires_at) VALUES ($1, $2, now() + $3 * interval '1 second') "
            "ON CONFLICT (uid) DO UPDATE SET record = EXCLUDED.record, expires_at = EXCLUDED.expires_at "
            "RETURNING (xmax = 0) AS inserted",
            uid, record, ttl,
        )
        if rows and rows[0]["inserted"]:
            await self._run("SELECT pg_notify($1, $2)", CHANNEL, uid)

    async def remove(self, uid: str) -> None:
        await self._run("WITH gone AS (DELETE FROM leakypool_workers WHERE uid = $1 RETURNING uid) "
                        "SELECT pg_notify($2, uid) FROM gone", uid, CHANNEL)

    async def live(self) -> dict[str, str]:
        await self._run("DELETE FROM leakypool_workers WHERE expires_at <= now()")
        rows = await self._run("SELECT uid, record FROM leakypool_workers WHERE expires_at > now()")
        return {row["uid"]: row["record"] for row in rows}

    async def listen(self, changed: Callable[[], None]) -> None:
        self._lost = asyncio.Event()
        try:
            self._connection.add_termination_listener(lambda _c: self._lost.set())
            await self._connection.add_listener(CHANNEL, lambda *_: changed())
        except Exception as exc:
            raise _error(self._url, exc) from exc

    async def watch(self) -> None:
        await self._lost.wait()
        raise StoreError(f"registry {redacted(self._url)}: the connection closed")

    async def close(self) -> None:
        self._connection.terminate()

    @property
    def closed(self) -> bool:
        return bool(self._connection.is_closed())


class _Sqlite:
    def __init__(self, path: str, connection: sqlite3.Connection) -> None:
        self._path = path
        self._connection = connection
        self._changed: Callable[[], None] = lambda: None
        self._version = 0

    @classmethod
    def open(cls, path: str) -> _Sqlite:
        try:
            connection = sqlite3.connect(path, timeout=SQLITE_BUSY_S, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SQLITE_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"registry sqlite://{path}: {type(exc).__name__}: {exc}") from exc
        return cls(path, connection)

    def _run(self, query: str, *args: Any) -> list[Any]:
        try:
            return self._connection.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"registry sqlite://{self._path}: {type(exc).__name__}: {exc}") from exc

    async def put(self, uid: str, record: str, ttl: float) -> None:
        self._run(
            "INSERT INTO leakypool_workers (uid, record, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (uid) DO UPDATE SET record = excluded.record, expires_at = excluded.expires_at",
            uid, record, time.time() + ttl,
        )

    async def remove(self, uid: str) -> None:
        self._run("DELETE FROM leakypool_workers WHERE uid = ?", uid)

    async def live(self) -> dict[str, str]:
        now = time.time()
        self._run("DELETE FROM leakypool_workers WHERE expires_at <= ?", now)
        return dict(self._run("SELECT uid, record FROM leakypool_workers WHERE expires_at > ?", now))

    async def listen(self, changed: Callable[[], None]) -> None:
        self._changed = changed
        self._version = self._run("PRAGMA data_version")[0][0]

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(DATA_VERSION_POLL_S)
            version = self._run("PRAGMA data_version")[0][0]
            if version != self._version:
                self._version = version
                self._changed()

    async def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._connection.close()


def _error(url: str, exc: BaseException) -> BaseException:
    """asyncpg's and the network's errors as one `StoreError` line without the password; others as they are."""
    if isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("asyncpg"):
        text = " ".join(str(exc).split()) or type(exc).__name__
        return StoreError(f"registry {redacted(url)}: {type(exc).__name__}: {text}")
    return exc
