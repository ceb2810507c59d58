"""The thread that owns a SQLite connection, and runs operations on it in group-committed batches.

    event loop ── run(op) ──> queue ──> thread: BEGIN; op; op; ...; COMMIT ──> one hop back: results

Whatever operations queued up while the thread was busy run in one
transaction (each multi-statement operation in a SAVEPOINT, so one failing
operation rolls back only itself), then one COMMIT, then every caller is
woken in one hop to the loop. A failed COMMIT fails the whole batch with
`StoreError` and leaves nothing half-written.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

from ..._base import SQLITE_COMPANIONS, private_file, trusted_file
from ..._errors import ConfigError, StoreError

BATCH_OPS: Final[int] = 1024
"""Operations one transaction takes at most (the rest wait for the next)."""

BUSY_TIMEOUT_S: Final[float] = 5.0
"""How long a write waits for another process's lock before it fails with StoreError."""

SINGLE: Final[str] = "single"
"""An operation of one statement: atomic by itself, it needs no savepoint of its own."""

_STOP: Final[object] = object()

T = TypeVar("T")

Op = Callable[[sqlite3.Connection], T]
"""An operation the thread runs on its connection, inside a transaction; its result is ``T``."""


class SQLiteThread:
    """A daemon thread with one connection to ``path``, serving `run` until `stop`.

    Args:
        path: The database file.
        url: Names the store in errors.
        synchronous: SQLite's ``synchronous`` setting (NORMAL or FULL).
    """

    def __init__(self, path: str, url: str, synchronous: str) -> None:
        self._path = path
        self._url = url
        self._synchronous = synchronous
        self._ops: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="leakypool-sqlite", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Finish what is queued, close the connection, join the thread."""
        self._ops.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)

    def _connect(self) -> sqlite3.Connection:
        """Open the file in WAL mode; another process switching it at the same moment is waited for."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        if self._path != ":memory:" and not self._path.startswith("file:"):
            # A job store is code (issue 51): a file, a -wal or a directory another user could write is refused,
            # found or made, before it is opened; a new one is 0600, and so SQLite makes its -wal and -shm.
            trusted_file(self._path, what=f"store {self._url}", companions=SQLITE_COMPANIONS)
            with contextlib.suppress(OSError):  # (sqlite3 says why it cannot open it)
                private_file(self._path)
            trusted_file(self._path, what=f"store {self._url}", companions=SQLITE_COMPANIONS)
        while True:
            connection = sqlite3.connect(
                self._path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            try:
                connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
                # Switching to WAL takes an exclusive lock and does not wait for it
                # (SQLite's busy handler is not used): retry while a peer holds it.
                connection.execute("PRAGMA journal_mode = WAL")
                connection.execute(f"PRAGMA synchronous = {self._synchronous}")
                return connection
            except sqlite3.OperationalError as exc:
                connection.close()
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
            except BaseException:
                connection.close()
                raise

    def _serve(self) -> None:
        connection: sqlite3.Connection | None = None
        error: BaseException | None = None
        try:
            connection = self._connect()
        except (sqlite3.Error, ConfigError) as exc:
            error = exc
        try:
            while True:
                batch = [self._ops.get()]
                while len(batch) < BATCH_OPS:
                    try:
                        batch.append(self._ops.get_nowait())
                    except queue.Empty:
                        break
                stop = any(item is _STOP for item in batch)
                work = [item for item in batch if item is not _STOP]
                if work:
                    if connection is None or error is not None:
                        self._fail(work, _translate(error, self._url) if error else StoreError(self._url), error)
                    else:
                        self._transaction(connection, work)
                if stop:
                    return
        finally:  # on stop, and if anything escapes (an op's BaseException): never left to the garbage collector
            if connection is not None:
                connection.close()

    def _transaction(self, connection: sqlite3.Connection, work: list[Any]) -> None:
        write = any(item[1] for item in work)
        results: list[tuple[asyncio.Future[Any], bool, Any]] = []
        try:
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            for op, kind, future in work:
                savepoint = kind is not SINGLE  # one statement is atomic by itself
                if savepoint:
                    connection.execute("SAVEPOINT op")
                try:
                    results.append((future, True, op(connection)))
                except Exception as exc:  # noqa: BLE001 - the op's fault is translated and handed to its caller's future
                    if not connection.in_transaction:  # some errors roll back the whole transaction
                        self._fail(work, _translate(exc, self._url), exc)
                        return
                    if savepoint:
                        connection.execute("ROLLBACK TO op")
                    results.append((future, False, _translate(exc, self._url)))
                if savepoint:
                    connection.execute("RELEASE op")
            connection.execute("COMMIT")
        except sqlite3.Error as exc:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            self._fail(work, _translate(exc, self._url), exc)
            return
        self._settle(results)

    def _fail(self, work: list[Any], error: BaseException, cause: BaseException | None) -> None:
        error.__cause__ = cause
        self._settle([(future, False, error) for _, _, future in work])

    @staticmethod
    def _settle(results: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
        for result in results:
            by_loop.setdefault(result[0].get_loop(), []).append(result)
        for loop, batch in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, batch)
            except RuntimeError:
                pass  # that loop closed: nobody waits any more

    async def run(self, op: Op[T], *, write: bool | str) -> T:
        """Run ``op(connection)`` on the thread, in the next transaction; its result or its error.

        ``write``: False for a read, True for a write of several statements,
        `SINGLE` for one statement (no savepoint needed).
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._ops.put((op, write, future))
        return await future


def _resolve(batch: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in batch:
        if future.done():
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


def _translate(exc: BaseException, url: str) -> BaseException:
    """Our errors pass; a database error becomes a `StoreError` naming the store and the cause."""
    if not isinstance(exc, sqlite3.Error):
        return exc
    if isinstance(exc, sqlite3.DatabaseError) and "not a database" in str(exc):
        return ConfigError(f"store {url}: not a SQLite database ({exc})")
    error = StoreError(f"store {url}: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error
