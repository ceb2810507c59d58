"""A worker reached over gRPC (TCP, optionally mutual TLS): workers on the LAN, or local ones over TCP.

Every call (Dispatch, State, Stop) is a stream of bytes that opens with
the handshake (`_handshake`): the pool sends nothing but its challenge
until the worker proved itself, and on loopback also checks that the
sockets at the worker's address belong to a trusted uid (`_peer`: a relay
of another user's owns its own). gRPC may reconnect under a channel
silently, so this is done per stream, never per channel. The Dispatch
stream's messages cross in pieces (`_pieces`). Off loopback without TLS,
the pool's proof asks for every message after it to be sealed, both ways
(`_stream_seal`): a relay on the path cannot alter a call undetected.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, Final

import grpc

from ._framing import MESSAGE_MAX_BYTES, ProtocolError
from ._handshake import HANDSHAKE_MAX_BYTES, TIMEOUT_S, Dialler, Refused, printable
from ._peer import check_tcp_listener, loopback_host
from ._pieces import Assembler, pieces
from ._proto import leakypool_pb2 as pb
from ._rpc import CHANNEL_OPTIONS, SERVICE
from ._session import Session
from ._side import expect
from ._stream_seal import StreamSeal
from ._tls import TlsCredentials
from ._trust import Trust

REPLY_MAX_BYTES = 64 << 10
"""The largest answer to State or Stop read (a `pb.WorkerState` is a few hundred bytes)."""


class GrpcChannel:
    """One gRPC channel to a worker: its Dispatch stream and its State and Stop calls.

    Args:
        address: ``host:port``.
        trust: What this pool proves itself with, and whom it trusts.
        uid: The worker it means to reach (None: whichever proves itself, a probe).
        credentials: TLS client credentials, for a worker that serves TLS.
    """

    def __init__(
        self, address: str, trust: Trust, uid: uuid.UUID | None = None, credentials: TlsCredentials | None = None
    ) -> None:
        expect()  # large values to this worker go out of band (in chunks on its stream: `Session.carry`)
        self._address = address
        self._trust = trust
        self.uid = uid
        host, _, port = address.rpartition(":")
        self._loopback = loopback_host(host)
        self._port = int(port) if port.isdigit() else 0
        self._sealed = credentials is None and self._loopback is None  # off loopback without TLS
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(
                address, credentials.channel_credentials(), options=CHANNEL_OPTIONS + credentials.channel_options()
            )
        else:
            self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._methods = {
            name: self._channel.stream_stream(f"/{SERVICE}/{name}") for name in ("Dispatch", "State", "Stop")
        }

    async def _open(self, method: str) -> tuple[Any, StreamSeal | None]:
        """A call of ``method`` whose worker has proven itself, and the seal of its messages (None: unsealed).

        Raises:
            Refused: it did not prove itself, or sockets at its (loopback) address belong to an untrusted uid.
            grpc.aio.AioRpcError: it could not be reached, or ended the call.
        """
        call = self._methods[method]()
        try:
            async with asyncio.timeout(TIMEOUT_S):
                if self._loopback is not None:  # first: nothing, not even a challenge, goes to another user's socket
                    check_tcp_listener(self._loopback, self._port, self._trust.uids, f"the worker at {self._address}")
                dialler = Dialler(self._trust.keyring, method, self.uid)
                await call.write(dialler.challenge())
                answer = await call.read()
                if answer is grpc.aio.EOF:
                    raise await _status(call)
                if len(answer) > HANDSHAKE_MAX_BYTES:
                    raise Refused(f"it answered the challenge with {len(answer)} bytes (not a leakypool worker)")
                proof = dialler.proof(answer, sealed=self._sealed)
                self.uid = dialler.uid
                await call.write(proof)
        except BaseException:
            call.cancel()
            raise
        return call, dialler.seal

    async def run(self, session: Session, describe: Callable[[BaseException], BaseException]) -> None:
        """Open a Dispatch stream and run ``session`` on it until it ends."""
        try:
            stream, seal = await self._open("Dispatch")
        except BaseException as exc:
            session.fail(describe(exc))  # calls already opened on it learn why
            if isinstance(exc, (grpc.aio.AioRpcError, OSError, ProtocolError, TimeoutError)):
                return
            raise
        assembler = Assembler(MESSAGE_MAX_BYTES)

        async def read() -> object:
            while True:
                piece = await stream.read()
                if piece is grpc.aio.EOF:
                    return piece
                whole = assembler.add(piece)
                if whole is not None:
                    return pb.Frames.FromString(whole if seal is None else seal.open(whole))

        async def write(frames: pb.Frames) -> None:
            data = frames.SerializeToString()
            try:
                for piece in pieces(data if seal is None else seal.seal(data)):
                    await stream.write(piece)
            except (asyncio.InvalidStateError, grpc.aio.AioRpcError):  # the call ended under the write: why?
                raise await _status(stream) from None

        try:
            await session.run(read, write, describe)
        finally:
            stream.cancel()

    @staticmethod
    def failure(reason: BaseException) -> tuple[str, str]:
        """The status code and detail of what ended a stream."""
        if isinstance(reason, grpc.aio.AioRpcError):  # its details are the worker's words: escaped and cut (issue 51)
            return reason.code().name, printable((reason.details() or "").encode(), DETAIL_MAX_BYTES)
        if isinstance(reason, Refused):
            return reason.code, str(reason)
        if isinstance(reason, ProtocolError):
            return "INTERNAL", str(reason)
        return "UNAVAILABLE", str(reason) or type(reason).__name__  # the stream died under us: gone, for now

    async def _unary(self, method: str, request: bytes, timeout: float) -> pb.WorkerState:
        async with asyncio.timeout(timeout):
            call, seal = await self._open(method)
            try:
                await call.write(next(pieces(request if seal is None else seal.seal(request))))
                reply = await call.read()
                if reply is grpc.aio.EOF:
                    raise await _status(call)
                whole = Assembler(REPLY_MAX_BYTES).add(reply)
                if whole is None:
                    raise ProtocolError(f"the worker answered {method} in more than one piece")
                return pb.WorkerState.FromString(whole if seal is None else seal.open(whole))
            finally:
                call.cancel()

    async def state(self, timeout: float) -> pb.WorkerState:
        """The worker's State call."""
        return await self._unary("State", pb.StateRequest().SerializeToString(), timeout)

    async def stop(self, grace: float, timeout: float) -> pb.WorkerState:
        """The worker's Stop call: drain (``grace`` s for calls in flight) and exit."""
        return await self._unary("Stop", pb.StopRequest(grace=grace).SerializeToString(), timeout)

    async def close(self) -> None:
        """Close the channel now."""
        await self._channel.close(grace=None)


DETAIL_MAX_BYTES: Final[int] = 1000
"""The most of a worker's status details kept (they end up in errors and logs)."""


async def _status(call: Any) -> grpc.aio.AioRpcError:
    """The status a call ended with, as the error to raise."""
    code, details, trailers = await call.code(), await call.details(), await call.trailing_metadata()
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details=details)
