"""An observation port: ``/metrics`` (Prometheus text) and ``/status`` (JSON), on loopback. Both sides use it.

A few lines of HTTP/1.0 on the process's own event loop (GET only, one
response per connection): the data lives on that loop, so serving it there
needs no lock and no thread, and no web framework joins the default install.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

_log = logging.getLogger("leakypool.metrics")

READ_TIMEOUT_S: Final[float] = 5.0
"""How long a client may take to send its request line and headers."""


class ObservationServer:
    """Serves ``/metrics`` and ``/status`` for one pool or one worker.

    Args:
        metrics: Bytes of the Prometheus exposition, after ``refresh``.
        status: The ``/status`` document.
        refresh: Reads what is slow to read (a pool's job counts) before either is served.
    """

    def __init__(
        self,
        metrics: Callable[[], bytes],
        status: Callable[[], Awaitable[dict[str, Any]]],
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._metrics = metrics
        self._status = status
        self._refresh = refresh
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port)
        self.address = self._server.sockets[0].getsockname()[:2]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                request = (await reader.readline()).decode("latin-1").split()
                while (await reader.readline()).strip():
                    pass  # headers: nothing here needs them
            path = request[1].split("?")[0] if len(request) >= 2 else ""
            if len(request) < 2 or request[0] != "GET":
                await _respond(writer, 405, "text/plain", b"GET only\n")
            elif path == "/metrics":
                if self._refresh is not None:
                    await self._refresh()
                await _respond(writer, 200, "text/plain; version=0.0.4; charset=utf-8", self._metrics())
            elif path == "/status":
                if self._refresh is not None:
                    await self._refresh()
                body = json.dumps(await self._status(), indent=1).encode()
                await _respond(writer, 200, "application/json", body)
            else:
                await _respond(writer, 404, "text/plain", b"try /metrics or /status\n")
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass  # a client that went away or never spoke: nothing to answer
        except Exception:
            _log.exception("observation port: answering a request failed")
            await _respond(writer, 500, "text/plain", b"internal error (logged)\n")
        finally:
            writer.close()


async def _respond(writer: asyncio.StreamWriter, code: int, kind: str, body: bytes) -> None:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error"}[code]
    head = f"HTTP/1.0 {code} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
    try:
        writer.write(head.encode() + body)
        await writer.drain()
    except ConnectionError:
        pass


class Rates:
    """Calls per second between two reads of a counter (the status view's "calls/s")."""

    def __init__(self) -> None:
        self._last: tuple[float, int] | None = None

    def per_second(self, total: int) -> float:
        now = time.monotonic()
        last, self._last = self._last, (now, total)
        if last is None or now <= last[0]:
            return 0.0
        return (total - last[1]) / (now - last[0])
