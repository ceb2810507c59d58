"""Reaching a PostgreSQL server: asyncpg on demand, errors as one line without the password, notices.

asyncpg is imported only when a PostgreSQL store is used (the ``postgres``
extra). Every error a store call meets becomes one `StoreError` line that
names the server but never its password; a connection that breaks is
terminated, never handed out again (`acquired`). Processes on one database wake
each other with LISTEN/NOTIFY on a connection of its own (`listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from ..._base import redacted
from ..._errors import AdmissionRejected, ConfigError, StoreError
from . import _postgres_sql as sql
from ._retry import lost_connection

CONNECT_TIMEOUT_S: Final[float] = 10.0
"""How long `PostgresStore.open` (or the listening connection) tries to reach the server."""

LISTEN_CHECK_S: Final[float] = 10.0
"""How often the listening connection is probed, in case its loss went unnoticed."""


def asyncpg_module() -> Any:
    """The asyncpg module.

    Raises:
        ConfigError: asyncpg is not installed (the ``postgres`` extra).
    """
    try:
        import asyncpg
    except ImportError:
        raise ConfigError("store: a postgresql:// store needs asyncpg: pip install 'leakypool[postgres]'") from None
    return asyncpg


def one_line(exc: BaseException) -> str:
    """``Type: message`` on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


@contextlib.asynccontextmanager
async def translated(url: str, pool: Any) -> AsyncIterator[None]:
    """asyncpg's and the network's errors as one `StoreError` line (``pool``'s connections expired:
    a server restart breaks every pooled connection)."""
    try:
        yield
    except (AdmissionRejected, StoreError, ConfigError):
        raise
    except Exception as exc:
        if isinstance(exc, OSError | TimeoutError) or type(exc).__module__.startswith("asyncpg"):
            if pool is not None:
                await pool.expire_connections()
            raise StoreError(f"store {redacted(url)}: {one_line(exc)}") from exc
        raise


class GuardedPool:
    """An asyncpg pool whose connections are never reused once broken (see `acquired`).

    ``acquire()`` and the one-statement calls (``fetch``, ``fetchrow``,
    ``fetchval``, ``execute``) as on the pool itself.
    """

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def acquire(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return acquired(self.pool)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        async def call(*args: Any) -> Any:
            try:
                async with acquired(self.pool) as db:
                    return await getattr(db, method)(*args)
            except asyncpg_module().InternalClientError as exc:
                if "cannot switch to state" not in str(exc):
                    raise
            # The connection broke while idle in the pool (see `acquired`): asyncpg refused
            # the statement before sending anything, so it runs on a new connection now.
            # (Only the statement's own refusal gets here: a connection that breaks on its
            # release, after the statement ran, raises nothing: `_release`.)
            async with acquired(self.pool) as db:
                return await getattr(db, method)(*args)

        return call


@contextlib.asynccontextmanager
async def acquired(pool: Any) -> AsyncIterator[Any]:
    """A connection of ``pool``, terminated instead of released if it met a connection-level error.

    A connection that met a connection-level error is terminated, never
    released for reuse, and the pool's other connections are expired: a
    server restart sends every backend a FATAL error, and asyncpg, reading
    it on an idle pooled connection, leaves that connection waiting for a
    ReadyForQuery that never comes (protocol state 2, ERROR_CONSUME) until
    it reads the end of the stream. Handed out in between, its first query
    fails with "cannot switch to state 12; another operation (2) is in
    progress" (issue #25). Expiring first makes the next acquire reconnect
    instead of reusing it. A connection whose statement was cancelled (a
    timeout) is terminated as well: releasing it would wait for the
    server to confirm the cancel, which a server out of reach never does.
    """
    db = await pool.acquire()
    try:
        yield db
    except BaseException as exc:
        lost = lost_connection(exc)
        if lost:
            await pool.expire_connections()
        if lost or isinstance(exc, asyncio.CancelledError):  # cancelled mid-statement: in an unknown state too
            with contextlib.suppress(asyncpg_module().InterfaceError):  # asyncpg already closed and released it
                db.terminate()  # frees the pool's holder: its next acquire connects anew
        raise
    finally:
        await _release(pool, db)


async def _release(pool: Any, db: Any) -> None:
    """Hand ``db`` back to ``pool``; a connection that breaks while asyncpg resets it is not the caller's error.

    By then the caller's statements have run and their answers are in: a
    write may have committed. asyncpg resets a released connection with a
    query of its own and, if the server died meanwhile (a failover, a
    restart), terminates the connection and raises. Raising that to the
    caller would report a committed write as failed, and a caller that then
    writes again finds its own write done ("not ours", issue 40): the
    connection is gone, the pool's others are expired, and the answer stands.
    """
    try:
        await pool.release(db)
    except Exception as exc:
        if not lost_connection(exc):
            raise
        await pool.expire_connections()  # the server went away: its other backends are broken too


async def listen(url: str, token: str, notice: Callable[[str, str], None]) -> None:
    """Deliver the notices of processes other than ``token``'s until cancelled (see `PostgresStore.watch`).

    Raises:
        StoreError: the connection could not be made or was lost (call again).
    """
    asyncpg = asyncpg_module()
    async with translated(url, None):
        connection = await asyncpg.connect(url, timeout=CONNECT_TIMEOUT_S)
    lost = asyncio.Event()

    def received(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        sender, _, message = payload.partition(" ")
        if sender != token:
            kind, _, argument = message.partition(" ")
            notice(kind, argument)

    try:
        async with translated(url, None):
            connection.add_termination_listener(lambda _connection: lost.set())
            await connection.add_listener(sql.CHANNEL, received)
            notice("due", "")
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(LISTEN_CHECK_S):
                        await lost.wait()
                    raise StoreError(f"store {redacted(url)}: the listening connection closed")
                await connection.fetchval("SELECT 1", timeout=CONNECT_TIMEOUT_S)
    finally:
        connection.terminate()
