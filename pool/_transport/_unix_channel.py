"""A worker reached over its unix socket without HTTP/2 (see `_framing`): a pool's own, or a standalone one.

Every connection (the Dispatch stream, the side connection, each State or
Stop) first checks that the worker runs as a trusted uid (``SO_PEERCRED``)
and proves both ends hold the secret (`_handshake`); nothing else is sent
before the worker proved itself, and nothing larger than a handshake is
read from it until then.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from typing import Final

from google.protobuf.message import DecodeError

from ._framer import PREFIX_BYTES, ProtocolError, framed, message_size
from ._framing import MESSAGE_MAX_BYTES, MessageStream, hello
from ._handshake import HANDSHAKE_MAX_BYTES, TIMEOUT_S, Dialler, Refused
from ._peer import check_unix
from ._proto import leakypool_pb2 as pb
from ._session import Session
from ._side import SideChannel, expect, register
from ._trust import Trust

SIDE_OPEN_TIMEOUT_S: Final[float] = 5.0
"""How long opening the side connection for large buffers may take; without it, values go in band."""

SIDE_OK: Final[bytes] = b"ok"
"""The worker's answer to a ``Buffers`` hello."""

REPLY_MAX_BYTES: Final[int] = 64 << 10
"""The largest answer to State or Stop read (a `pb.WorkerState` is a few hundred bytes)."""


class UnixChannel:
    """Connections to one worker's unix socket: a Dispatch stream, and one connection per State or Stop call.

    Args:
        path: The worker's socket.
        trust: What this pool proves itself with, and whom it trusts.
        uid: The worker it means to reach (None: whichever proves itself, a probe).
    """

    def __init__(self, path: str, trust: Trust, uid: uuid.UUID | None = None) -> None:
        expect()  # large values to this worker go out of band (`_buffers`)
        self._path = path
        self._trust = trust
        self.uid = uid
        self._streams: set[MessageStream] = set()

    async def _open(self, method: str, limit: int = MESSAGE_MAX_BYTES) -> MessageStream:
        """A connection for ``method`` whose worker has proven itself; its messages may then be up to ``limit``.

        A Dispatch stream keeps a copy of its socket (``read_rest``): a connection lost on a write still
        has what the worker wrote read to its end, so the pool learns which queued calls it started.

        Raises:
            Refused: the worker is not a trusted uid, or did not prove itself.
            OSError: it cannot be reached.
        """
        _, stream = await asyncio.get_running_loop().create_unix_connection(
            lambda: MessageStream(HANDSHAKE_MAX_BYTES, read_rest=method == "Dispatch"), self._path
        )
        self._streams.add(stream)
        try:
            async with asyncio.timeout(TIMEOUT_S):
                transport = stream.transport
                check_unix(transport.get_extra_info("socket") if transport else None, self._trust.uids, self._what)
                dialler = Dialler(self._trust.keyring, method, self.uid)
                await stream.send(hello(method))
                await stream.send(dialler.challenge())
                answer = await stream.receive()
                if answer is None:
                    raise ConnectionResetError(f"{self._path}: the worker hung up during the handshake")
                proof = dialler.proof(answer)
                self.uid = dialler.uid
                stream.limit = limit  # it proved itself: its messages may be read
                await stream.send(proof)
        except BaseException:
            self._drop(stream)
            raise
        return stream

    @property
    def _what(self) -> str:
        return f"the worker at unix:{self._path}"

    def _drop(self, stream: MessageStream) -> None:
        self._streams.discard(stream)
        stream.close()

    async def run(self, session: Session, describe: Callable[[BaseException], BaseException]) -> None:
        """Open a Dispatch stream and run ``session`` on it until it ends.

        The side connection is opened beside it (each is a handshake: the two
        take as long as the longer one), and the session starts once both are
        known, so the calls queued meanwhile carry their large values out of
        band. It once started without waiting: a large value sent on the
        stream's first turns went in band, and while the loop pickled and
        wrote it the side connection's opening could time out, leaving every
        later large value on the stream in band too (a 1 GiB echo took 20-29 s
        instead of 2). A side connection that does not open within its bound
        leaves the stream in band, as for a worker that takes none.
        """
        opening_side = asyncio.ensure_future(self._open_side())  # ended and awaited below on every path

        def side() -> SideChannel | None:
            if not opening_side.done() or opening_side.cancelled() or opening_side.exception() is not None:
                return None
            channel = opening_side.result()
            return None if channel is None or channel.closed else channel

        try:
            stream = await self._open("Dispatch")
        except BaseException as exc:
            await _close_side(opening_side)
            session.fail(describe(exc))  # calls already opened on it learn why
            if isinstance(exc, OSError | ProtocolError):
                return
            raise
        try:
            await asyncio.wait([opening_side])  # bounded by its own timeout; raises nothing (see `side`)
            await session.run(
                stream.read_frames,
                stream.write_frames,
                describe,
                attach=stream.attach,
                write_now=stream.write_frames_now,
                busy_at=stream.busy_at,
                side=side,
                read_to_end=stream.read_rest,
            )
        finally:
            self._drop(stream)
            await _close_side(opening_side)

    async def _open_side(self) -> SideChannel | None:
        """The side connection large buffers cross by (see `_buffers`); None if the worker does not take one."""
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(SIDE_OPEN_TIMEOUT_S):
                await loop.sock_connect(sock, self._path)
                check_unix(sock, self._trust.uids, self._what)
                dialler = Dialler(self._trust.keyring, "Buffers", self.uid)
                await loop.sock_sendall(sock, framed(hello("Buffers")) + framed(dialler.challenge()))
                proof = dialler.proof(await _receive(sock, HANDSHAKE_MAX_BYTES))
                await loop.sock_sendall(sock, framed(proof))
                answer = await _receive(sock, len(SIDE_OK))
        except (OSError, TimeoutError, ProtocolError):  # (Refused is a ConnectionError)
            sock.close()
            return None
        except BaseException:  # cancelled (the stream ended first): the socket goes with it
            sock.close()
            raise
        if answer != SIDE_OK:
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
        if isinstance(reason, Refused):
            return reason.code, detail
        if isinstance(reason, (ProtocolError, DecodeError)):
            return "INTERNAL", detail
        return "UNAVAILABLE", detail

    async def _unary(self, method: str, request: bytes, timeout: float) -> pb.WorkerState:
        async with asyncio.timeout(timeout):
            stream = await self._open(method, REPLY_MAX_BYTES)
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


async def _close_side(opening: asyncio.Future[SideChannel | None]) -> None:
    """End the side connection's opening if it still runs, and close the connection if it opened."""
    opening.cancel()
    await asyncio.wait([opening])  # (ends at once: cancelled, or done already; raises nothing of its own)
    if opening.done() and not opening.cancelled() and opening.exception() is None and (side := opening.result()):
        side.close()


async def _receive(sock: socket.socket, limit: int) -> bytes:
    """One framed message of at most ``limit`` bytes from ``sock`` (non-blocking, on the loop).

    Raises:
        ProtocolError: it announces more.
        ConnectionResetError: the peer hung up first.
    """
    return await _exactly(sock, message_size(await _exactly(sock, PREFIX_BYTES), limit))


async def _exactly(sock: socket.socket, n: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < n:
        more = await loop.sock_recv(sock, n - len(data))
        if not more:
            raise ConnectionResetError("the worker hung up during the handshake")
        data += more
    return data
