"""A worker this pool spawned, reached over its unix socket without HTTP/2 (see `_framing`)."""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable
from typing import Final

from google.protobuf.message import DecodeError

from ._framing import MessageStream, ProtocolError, framed, hello
from ._proto import leakypool_pb2 as pb
from ._session import Session
from ._side import SideChannel, expect, register

SIDE_OPEN_TIMEOUT_S: Final[float] = 5.0
"""How long opening the side connection for large buffers may take; without it, values go in band."""

SIDE_OK: Final[bytes] = b"ok"
"""The worker's answer to a ``Buffers`` hello."""


class UnixChannel:
    """Connections to one worker's unix socket: a Dispatch stream, and one connection per State or Stop call.

    Args:
        path: The worker's socket.
    """

    def __init__(self, path: str) -> None:
        expect()  # large values to this worker go out of band (`_buffers`)
        self._path = path
        self._streams: set[MessageStream] = set()

    async def _open(self, method: str) -> MessageStream:
        _, stream = await asyncio.get_running_loop().create_unix_connection(
            functools.partial(MessageStream, read_rest=method == "Dispatch"), self._path
        )
        self._streams.add(stream)
        try:
            await stream.send(hello(method))
        except BaseException:
            self._drop(stream)
            raise
        return stream

    def _drop(self, stream: MessageStream) -> None:
        self._streams.discard(stream)
        stream.close()

    async def run(self, session: Session, describe: Callable[[BaseException], BaseException]) -> None:
        """Open a Dispatch stream and run ``session`` on it until it ends."""
        try:
            stream = await self._open("Dispatch")
        except BaseException as exc:
            session.fail(describe(exc))  # calls already opened on it learn why
            if isinstance(exc, OSError):
                return
            raise
        side = await self._open_side()
        try:
            await session.run(
                stream.read_frames,
                stream.write_frames,
                describe,
                attach=stream.attach,
                write_now=stream.write_frames_now,
                busy_at=stream.busy_at,
                side=lambda: None if side is None or side.closed else side,
                read_to_end=lambda: stream.read_to_end,
            )
        finally:
            self._drop(stream)
            if side is not None:
                side.close()

    async def _open_side(self) -> SideChannel | None:
        """The side connection large buffers cross by (see `_buffers`); None if the worker does not take one."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(SIDE_OPEN_TIMEOUT_S):
                await loop.sock_connect(sock, self._path)
                await loop.sock_sendall(sock, framed(hello("Buffers")))
                answer = b""
                while len(answer) < len(framed(SIDE_OK)):
                    more = await loop.sock_recv(sock, len(framed(SIDE_OK)) - len(answer))
                    if not more:
                        break
                    answer += more
        except (OSError, TimeoutError):
            sock.close()
            return None
        if answer != framed(SIDE_OK):
            sock.close()
            return None
        side = SideChannel(sock)
        register(self, side)
        return side

    @staticmethod
    def failure(reason: BaseException) -> tuple[str, str]:
        """The status code and detail of what ended a stream.

        Bytes that are not our protocol are a hard fault (the worker gets
        evicted, as for gRPC's INTERNAL); anything else means the worker is
        gone, for now.
        """
        detail = str(reason) or type(reason).__name__
        if isinstance(reason, (ProtocolError, DecodeError)):
            return "INTERNAL", detail
        return "UNAVAILABLE", detail

    async def _unary(self, method: str, request: bytes, timeout: float) -> pb.WorkerState:
        async with asyncio.timeout(timeout):
            stream = await self._open(method)
            try:
                await stream.send(request)
                reply = await stream.receive()
            finally:
                self._drop(stream)
        if reply is None:
            raise ConnectionResetError(f"{self._path}: the worker closed the connection without answering {method}")
        return pb.WorkerState.FromString(reply)

    async def state(self, timeout: float) -> pb.WorkerState:
        """The worker's State call."""
        return await self._unary("State", pb.StateRequest().SerializeToString(), timeout)

    async def stop(self, grace: float, timeout: float) -> pb.WorkerState:
        """The worker's Stop call: drain (``grace`` s for calls in flight) and exit."""
        return await self._unary("Stop", pb.StopRequest(grace=grace).SerializeToString(), timeout)

    async def close(self) -> None:
        """Close every connection now."""
        for stream in list(self._streams):
            self._drop(stream)

    def __repr__(self) -> str:
        return f"<UnixChannel {self._path} connections={len(self._streams)}>"
