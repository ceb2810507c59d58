"""An observation port: ``/`` (the page), ``/metrics`` (Prometheus text) and ``/status`` (JSON). Both sides use it.

A few lines of HTTP/1.0 on the process's own event loop (GET only, one
response per connection): the data lives on that loop, so serving it there
needs no lock and no thread, and no web framework joins the default install.
Loopback by default; a port bound elsewhere answers only requests that carry
its token (``Authorization: Bearer TOKEN`` or ``?token=TOKEN``), and a
token can be required on loopback too.

A request is answered only if its ``Host`` is an IP address, ``localhost``
or a name configured (``metrics_names``): a web page whose own name was
made to resolve to 127.0.0.1 (DNS rebinding, as Jupyter guards against)
sends its own name, and reads nothing (issue 43). A request line or header
over `LINE_MAX_BYTES`, more than `MAX_HEADERS` headers, or a request that is
not HTTP gets a 4xx and one log line.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Final

from ._page import page_html

_log = logging.getLogger("leakypool.metrics")

READ_TIMEOUT_S: Final[float] = 5.0
"""How long a client may take to send its request line and headers."""

MAX_HEADERS: Final[int] = 64
"""Headers one request may carry (more: 431)."""

LINE_MAX_BYTES: Final[int] = 8 << 10
"""The longest request line or header line read (longer: 414 or 431, and one log line)."""


class Refused(Exception):
    """A request this port will not read further: its status, and why (one log line)."""

    def __init__(self, code: int, why: str) -> None:
        super().__init__(why)
        self.code = code


class ObservationServer:
    """Serves ``/`` (the page), ``/metrics`` and ``/status`` for one pool or one worker.

    Args:
        metrics: Bytes of the Prometheus exposition, after ``refresh``.
        status: The ``/status`` document.
        refresh: Reads what is slow to read (a pool's job counts) before either is served.
        token: When set, every request must carry it (the settings require one off loopback).
        names: Host names (besides IP addresses and ``localhost``) requests may name in ``Host``.
    """

    def __init__(
        self,
        metrics: Callable[[], bytes],
        status: Callable[[], Awaitable[dict[str, Any]]],
        refresh: Callable[[], Awaitable[None]] | None = None,
        token: str = "",
        names: tuple[str, ...] = (),
    ) -> None:
        self._metrics = metrics
        self._status = status
        self._refresh = refresh
        self._token = token.encode()
        self._names = frozenset(n.lower() for n in names) | {"localhost"}
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None

    @property
    def port(self) -> int:
        """The TCP port it listens on (once started)."""
        if self.address is None:
            raise RuntimeError("the observation server was not started")
        return self.address[1]

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._serve, host, port, limit=LINE_MAX_BYTES)
        self.address = self._server.sockets[0].getsockname()[:2]

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):
                request = (await _line(reader, 414)).split()
                headers = await _read_headers(reader)
            if len(request) != 3 or not request[2].startswith("HTTP/"):
                raise Refused(400, f"not an HTTP request line: {' '.join(request)[:80]!r}")
            self._check_host(headers.get("host", ""))
            path, _, query = request[1].partition("?")
            if request[0] != "GET":
                await _respond(writer, 405, "text/plain", b"GET only\n")
            elif self._token and not self._authorized(headers, query):
                await _respond(writer, 401, "text/plain", b"token required: Authorization: Bearer TOKEN, or ?token=\n")
            elif path == "/":
                await _respond(writer, 200, "text/html; charset=utf-8", page_html())
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
                await _respond(writer, 404, "text/plain", b"try /, /metrics or /status\n")
        except Refused as exc:
            peer = writer.get_extra_info("peername")
            _log.warning("observation port: refused a request from %s: %d %s", peer, exc.code, exc)
            await _respond(writer, exc.code, "text/plain", f"{exc}\n".encode())
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass  # a client that went away or never spoke: nothing to answer
        except Exception:  # noqa: BLE001 - one request's fault answers 500 and is logged; the port keeps serving
            _log.exception("observation port: answering a request failed")
            await _respond(writer, 500, "text/plain", b"internal error (logged)\n")
        finally:
            writer.close()

    def _check_host(self, host: str) -> None:
        """Refuse a ``Host`` that is not an IP address, ``localhost`` or a configured name (DNS rebinding).

        Raises:
            Refused: 421, naming the setting that would allow it.
        """
        name = host.strip().lower()
        name = name[1 : name.find("]")] if name.startswith("[") else name.rpartition(":")[0] or name
        if name in self._names:
            return
        try:
            ipaddress.ip_address(name)
        except ValueError:
            why = "no Host header" if not name else f"Host {name[:80]!r} is not a name this port answers to"
            raise Refused(421, f"{why} (an IP address, localhost, or one in metrics_names)") from None

    def _authorized(self, headers: dict[str, str], query: str) -> bool:
        """Whether the request carries this port's token (compared in constant time)."""
        scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
        given = credentials.strip() if scheme.lower() == "bearer" else ""  # (the scheme is case-insensitive: RFC 9110)
        if not given:
            given = urllib.parse.parse_qs(query).get("token", [""])[0]
        return hmac.compare_digest(given.encode(), self._token)


async def _line(reader: asyncio.StreamReader, code: int) -> str:
    """One line of the request, stripped.

    Raises:
        Refused: it is over `LINE_MAX_BYTES` (with ``code``), or not text.
    """
    try:
        return (await reader.readline()).decode("ascii").strip()
    except ValueError as exc:  # (asyncio's LimitOverrunError, turned into ValueError by readline; or not ASCII)
        raise Refused(code, f"a line over {LINE_MAX_BYTES} bytes, or not ASCII ({type(exc).__name__})") from None


async def _read_headers(reader: asyncio.StreamReader) -> dict[str, str]:
    """The request's headers, names lower-cased.

    Raises:
        Refused: more than `MAX_HEADERS`, or one that is too long (431).
    """
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADERS + 1):
        line = await _line(reader, 431)
        if not line:
            return headers
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    raise Refused(431, f"more than {MAX_HEADERS} headers")


_REASONS: Final[dict[int, str]] = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    414: "URI Too Long",
    421: "Misdirected Request",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
}

PAGE_POLICY: Final[str] = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"
)
"""The page's Content-Security-Policy: its own inline script and style, and requests to this port only."""


async def _respond(writer: asyncio.StreamWriter, code: int, kind: str, body: bytes) -> None:
    head = f"HTTP/1.0 {code} {_REASONS[code]}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n"
    if code == 200:
        head += "Cache-Control: no-store\r\n"
    if kind.startswith("text/html"):
        head += f"Content-Security-Policy: {PAGE_POLICY}\r\nX-Content-Type-Options: nosniff\r\n"
    head += "\r\n"
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
