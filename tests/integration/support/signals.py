"""`Signals`: a socket server routines report to, so tests wait on events."""

from __future__ import annotations

import asyncio
import collections
from typing import Self


class Signals:
    """Collects lines routines send with ``routines.notify(address, ...)``.

    Use as ``async with Signals() as signals:`` and pass ``signals.address``
    to routines; ``await signals.wait("started")`` returns the first line
    starting with that prefix (bounded by a timeout).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.lines: list[str] = []
        self._new = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None
        self._taken: collections.Counter[str] = collections.Counter()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._client, self.host, 0)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async for raw in reader:
                async with self._new:
                    self.lines.append(raw.decode().strip())
                    self._new.notify_all()
        finally:
            writer.close()

    async def wait(self, prefix: str, timeout: float = 30.0) -> str:
        """The next not-yet-returned line starting with ``prefix``."""
        async with asyncio.timeout(timeout):
            async with self._new:
                while True:
                    matches = [line for line in self.lines if line.startswith(prefix)]
                    if len(matches) > self._taken[prefix]:
                        self._taken[prefix] += 1
                        return matches[self._taken[prefix] - 1]
                    await self._new.wait()

    def count(self, prefix: str) -> int:
        """Lines so far starting with ``prefix``."""
        return sum(1 for line in self.lines if line.startswith(prefix))
