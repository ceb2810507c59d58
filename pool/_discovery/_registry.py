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
  Each connection has a thread of its own that runs every statement: a
  file another process holds locked makes a statement wait up to
  `SQLITE_BUSY_S`, and that wait must not stall the event loop (a busy
  worker still says no in milliseconds; a pool keeps dispatching).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sqlite3
import time
from collections.abc import Callable
from typing import Any, Final, NamedTuple, Protocol

from .._base import SQLITE_COMPANIONS, private_file, redacted, trusted_file
from .._errors import ConfigError, StoreError
from .._transport import MAC_BYTES, MAGIC, Seal

CHANNEL: Final[str] = "leakypool_workers"
"""The PostgreSQL NOTIFY channel for arrivals and departures."""

CONNECT_TIMEOUT_S: Final[float] = 10.0
"""How long a connection attempt to the registry may take."""

SQLITE_BUSY_S: Final[float] = 5.0
"""How long an SQLite statement waits for another writer's lock."""

DATA_VERSION_POLL_S: Final[float] = 0.1
"""How often an SQLite reader checks ``PRAGMA data_version`` (one cheap read; no table scan)."""

MAX_ROWS: Final[int] = 4096
"""Live rows one read takes at most (a fleet is far smaller; a role that floods the table cannot grow a pool past it)."""

RECORD_MAX_BYTES: Final[int] = 4096
"""The longest record read (a genuine one is ~300 bytes); longer ones stay in the database, unread (issue 51)."""


class Rows(NamedTuple):
    """What one read of the registry found: the live rows within bounds, and how many it left unread."""

    records: dict[str, str]
    """uid -> record: at most `MAX_ROWS`, none over `RECORD_MAX_BYTES`."""
    oversize: int = 0
    """Live rows longer than `RECORD_MAX_BYTES` (left unread)."""


RECORD_FIELD: Final[str] = "worker record"
"""The field a record's seal is bound to (beside the worker's uid)."""


def seal_record(seal: Seal, uid: str, record: str) -> str:
    """``record`` as the registry keeps it: ``LPS1 <MAC, hex> <record>``, sealed for worker ``uid``."""
    return f"{MAGIC.decode()} {seal.mac(uid, RECORD_FIELD, record.encode()).hex()} {record}"


def open_record(seal: Seal, uid: str, stored: str) -> str | None:
    """The record inside ``stored`` if it was sealed for ``uid`` under a secret held, else None (nothing parsed)."""
    magic, _, rest = stored.partition(" ")
    mac, _, record = rest.partition(" ")
    if magic != MAGIC.decode() or len(mac) != 2 * MAC_BYTES:
        return None
    try:
        raw = bytes.fromhex(mac)
    except ValueError:
        return None
    return record if seal.checks(uid, RECORD_FIELD, record.encode(), raw) else None


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

    async def live(self) -> Rows:
        """Rows not expired, within `MAX_ROWS` and `RECORD_MAX_BYTES` (expired ones are deleted)."""
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


async def connect(url: str) -> Registry:
    """A connection to the registry at ``url`` (the table made if missing).

    Raises:
        ConfigError: not a registry URL, or asyncpg missing for PostgreSQL.
        StoreError: the store cannot be reached (one line, no password).
    """
    if url.startswith("sqlite:///"):
        return await _Sqlite.open(url.removeprefix("sqlite://"))
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
        except Exception as exc:
            raise _error(url, exc) from exc
        try:
            async with connection.transaction():  # one creator at a time: CREATE IF NOT EXISTS races otherwise
                await connection.execute("SELECT pg_advisory_xact_lock(hashtext('leakypool_workers'))")
                await connection.execute(_PG_SCHEMA)
        except BaseException as exc:
            connection.terminate()  # refused or cancelled after it connected: nobody else will close it
            if isinstance(exc, Exception):
                raise _error(url, exc) from exc
            raise
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
            uid,
            record,
            ttl,
        )
        if rows and rows[0]["inserted"]:
            await self._run("SELECT pg_notify($1, $2)", CHANNEL, uid)

    async def remove(self, uid: str) -> None:
        await self._run(
            "WITH gone AS (DELETE FROM leakypool_workers WHERE uid = $1 RETURNING uid) "
            "SELECT pg_notify($2, uid) FROM gone",
            uid,
            CHANNEL,
        )

    async def live(self) -> Rows:
        await self._run("DELETE FROM leakypool_workers WHERE expires_at <= now()")
        rows = await self._run(
            "SELECT uid, record FROM leakypool_workers WHERE expires_at > now() AND octet_length(record) <= $1 "
            "ORDER BY uid LIMIT $2",
            RECORD_MAX_BYTES,
            MAX_ROWS,
        )
        oversize = await self._run(
            "SELECT count(*) AS n FROM leakypool_workers WHERE expires_at > now() AND octet_length(record) > $1",
            RECORD_MAX_BYTES,
        )
        return Rows({row["uid"]: row["record"] for row in rows}, oversize[0]["n"])

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
    """One connection, used only by its own thread: a locked file (5 s busy wait) never stalls the loop.

    Not the job store's ``SQLiteThread``: discovery may not import ``pool._jobs``
    (tests/unit/test_layout.py), and these single statements need no group commit.
    """

    def __init__(
        self, path: str, thread: concurrent.futures.ThreadPoolExecutor, connection: sqlite3.Connection
    ) -> None:
        self._path = path
        self._thread = thread
        self._connection = connection
        self._changed: Callable[[], None] = lambda: None
        self._version = 0

    @classmethod
    async def open(cls, path: str) -> _Sqlite:
        thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="leakypool-registry")
        opening = thread.submit(_sqlite_connect, path)
        try:
            connection = await asyncio.wrap_future(opening)  # cancelled before it started: it never runs
        except BaseException:
            # Cancelled while it was under way: closed once made, on the thread that made it (not through the event
            # loop, which may be closed by then: a pool that exits at once closes its discovery in mid-open).
            opening.add_done_callback(_close_opened)
            thread.shutdown(wait=False)
            raise
        return cls(path, thread, connection)

    async def _run(self, query: str, *args: Any) -> list[Any]:
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._execute, query, args)

    def _execute(self, query: str, args: tuple[Any, ...]) -> list[Any]:
        try:
            return self._connection.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"registry sqlite://{self._path}: {type(exc).__name__}: {exc}") from exc

    async def put(self, uid: str, record: str, ttl: float) -> None:
        await self._run(
            "INSERT INTO leakypool_workers (uid, record, expires_at) VALUES (?, ?, ?) "
            "ON CONFLICT (uid) DO UPDATE SET record = excluded.record, expires_at = excluded.expires_at",
            uid,
            record,
            time.time() + ttl,
        )

    async def remove(self, uid: str) -> None:
        await self._run("DELETE FROM leakypool_workers WHERE uid = ?", uid)

    async def live(self) -> Rows:
        now = time.time()
        await self._run("DELETE FROM leakypool_workers WHERE expires_at <= ?", now)
        rows = await self._run(
            "SELECT uid, record FROM leakypool_workers WHERE expires_at > ? AND length(CAST(record AS BLOB)) <= ? "
            "ORDER BY uid LIMIT ?",
            now,
            RECORD_MAX_BYTES,
            MAX_ROWS,
        )
        oversize = await self._run(
            "SELECT count(*) FROM leakypool_workers WHERE expires_at > ? AND length(CAST(record AS BLOB)) > ?",
            now,
            RECORD_MAX_BYTES,
        )
        return Rows(dict(rows), oversize[0][0])

    async def listen(self, changed: Callable[[], None]) -> None:
        self._changed = changed
        self._version = (await self._run("PRAGMA data_version"))[0][0]

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(DATA_VERSION_POLL_S)
            version = (await self._run("PRAGMA data_version"))[0][0]
            if version != self._version:
                self._version = version
                self._changed()

    async def close(self) -> None:
        """Close the connection on its thread (after any statement still running), then let the thread go.

        Shielded: a caller cancelled meanwhile returns at once, and the connection is closed all the same.
        """
        closing = asyncio.get_running_loop().run_in_executor(self._thread, self._connection.close)
        self._thread.shutdown(wait=False)  # the close queued before it still runs
        try:
            await asyncio.shield(closing)
        except sqlite3.Error:
            pass


def _close_opened(opening: concurrent.futures.Future[sqlite3.Connection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


def _sqlite_connect(path: str) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with the table (on the registry's thread): switching to WAL does not
    wait on a busy file by itself, so a peer switching it at the same moment is retried for `SQLITE_BUSY_S`."""
    deadline = time.monotonic() + SQLITE_BUSY_S
    # Where workers are is a place that carries trust (issue 51): a file, a -wal or a directory another user
    # could write is refused, found or made; a new one is 0600, and so SQLite makes its -wal and -shm.
    trusted_file(path, what=f"registry sqlite://{path}", companions=SQLITE_COMPANIONS)
    with contextlib.suppress(OSError):  # (sqlite3 says why it cannot open it)
        private_file(path)
    trusted_file(path, what=f"registry sqlite://{path}", companions=SQLITE_COMPANIONS)
    while True:
        try:
            connection = sqlite3.connect(path, timeout=SQLITE_BUSY_S, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"registry sqlite://{path}: {type(exc).__name__}: {exc}") from exc
        try:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SQLITE_SCHEMA)
            return connection
        except sqlite3.Error as exc:
            connection.close()
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise StoreError(f"registry sqlite://{path}: {type(exc).__name__}: {exc}") from exc
            time.sleep(0.01)
        except BaseException:
            connection.close()
            raise


def _error(url: str, exc: BaseException) -> BaseException:
    """asyncpg's and the network's errors as one `StoreError` line without the password; others as they are."""
    if isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("asyncpg"):
        text = " ".join(str(exc).split()) or type(exc).__name__
        return StoreError(f"registry {redacted(url)}: {type(exc).__name__}: {text}")
    return exc
