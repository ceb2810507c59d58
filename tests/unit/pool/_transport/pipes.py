"""Two `Session`s joined by in-memory pipes, for unit tests of what runs over a stream (no socket, no gRPC).

Each message is serialized and parsed again on its way, as off a wire, and
counted. ``end()`` ends both directions as a stream's end would (gRPC's EOF).
"""

from __future__ import annotations

import asyncio
from typing import Self

import grpc

import pool
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session


class SessionPair:
    """``odd`` and ``even`` (the two ends, by the parity of the call ids each opens) joined in memory."""

    def __init__(self, odd: Session, even: Session) -> None:
        self.odd, self.even = odd, even
        self.to_odd: asyncio.Queue[pb.Frames | object] = asyncio.Queue()
        self.to_even: asyncio.Queue[pb.Frames | object] = asyncio.Queue()
        self.messages_to_odd = self.messages_to_even = 0
        self.frames_to_odd = 0
        self._running: list[asyncio.Future[None]] = []

    async def __aenter__(self) -> Self:
        async def to_even(message: pb.Frames) -> None:
            self.messages_to_even += 1
            self.to_even.put_nowait(pb.Frames.FromString(message.SerializeToString()))

        async def to_odd(message: pb.Frames) -> None:
            self.messages_to_odd += 1
            self.frames_to_odd += len(message.frames)
            self.to_odd.put_nowait(pb.Frames.FromString(message.SerializeToString()))

        lost = lambda exc: pool.WorkerBroken(f"lost: {exc}")
        self._running = [
            asyncio.ensure_future(self.odd.run(self.to_odd.get, to_even, lost)),  # type: ignore[arg-type]
            asyncio.ensure_future(self.even.run(self.to_even.get, to_odd, lost)),  # type: ignore[arg-type]
        ]
        return self

    async def __aexit__(self, *exc: object) -> None:
        for running in self._running:
            running.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    def end(self) -> None:
        """The stream ends, both ways."""
        self.to_odd.put_nowait(grpc.aio.EOF)
        self.to_even.put_nowait(grpc.aio.EOF)
