"""`Gate`: a socket server that holds plain routines (`plain_routines.gate`) until the test opens it."""

from __future__ import annotations

import asyncio
from typing import Self

WAIT_S = 30.0
"""How long a test waits for a routine to reach the gate (bounds a broken test, not a slow machine)."""


class Gate:
    """``async with Gate() as gate``: routines connect and block; ``await gate.arrived()`` names each; `open` lets all go."""

    def __init__(self) -> None:
        self._arrivals: asyncio.Queue[str] = asyncio.Queue()
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.address: tuple[str, int] = ("127.0.0.1", 0)

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.address = self._server.sockets[0].getsockname()[:2]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.open()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def arrived(self) -> str:
        """The label of the next routine to reach the gate."""
        async with asyncio.timeout(WAIT_S):
            return await self._arrivals.get()

    def open(self) -> None:
        """Let every routine waiting at the gate go on."""
        for writer in self._writers:
            if not writer.is_closing():
                writer.write(b"x")
                writer.close()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        line = await reader.readline()
        await self._arrivals.put(line.decode().strip())
