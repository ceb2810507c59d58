"""Reaching a PostgreSQL server: asyncpg on demand, errors as one line without the password, notices.

asyncpg is imported only when a PostgreSQL store is used (the ``postgres``
extra). Every error a store call meets becomes one `StoreError` line that
names the server but never its password. Processes on one database wake
each other with LISTEN/NOTIFY on a connection of its own (`listen`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

from ..._base._redact import redacted as redacted
from ..._errors import AdmissionRejected, ConfigError, StoreError
from . import _postgres_sql as sql

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
