"""A worker reached over gRPC (TCP, optionally mutual TLS): workers on the LAN, or local ones over TCP."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import grpc

from ._proto import leakypool_pb2 as pb
from ._rpc import CHANNEL_OPTIONS, SERVICE
from ._secret import METADATA_KEY
from ._session import Session
from ._tls import TlsCredentials

WHY_TIMEOUT_S: Final[float] = 2.0
"""How long to wait for a worker's answer to why it ended a stream (see `GrpcChannel._why`)."""


class GrpcChannel:
    """One gRPC channel to a worker: its Dispatch stream and its State and Stop calls.

    Args:
        address: ``host:port``.
        credentials: TLS client credentials, for a worker that serves TLS.
        secret: Sent with every call (metadata `METADATA_KEY`): a worker
            on TCP refuses callers without its secret.
    """

    def __init__(self, address: str, credentials: TlsCredentials | None = None, secret: str | None = None) -> None:
        self._metadata = ((METADATA_KEY, secret),) if secret else None
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(
                address, credentials.channel_credentials(), options=CHANNEL_OPTIONS + credentials.channel_options()
            )
        else:
            self._channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._open_stream = self._channel.stream_stream(
            f"/{SERVICE}/Dispatch",
            request_serializer=pb.Frames.SerializeToString,
            response_deserializer=pb.Frames.FromString,
        )
        self._state = self._channel.unary_unary(
            f"/{SERVICE}/State",
            request_serializer=pb.StateRequest.SerializeToString,
            response_deserializer=pb.WorkerState.FromString,
        )
        self._stop = self._channel.unary_unary(
            f"/{SERVICE}/Stop",
            request_serializer=pb.StopRequest.SerializeToString,
            response_deserializer=pb.WorkerState.FromString,
        )

    async def run(self, session: Session, describe: Callable[[BaseException], BaseException]) -> None:
        """Open a Dispatch stream and run ``session`` on it until it ends."""
        stream = self._open_stream(metadata=self._metadata)

        async def read() -> object:
            try:
                return await stream.read()
            except grpc.aio.AioRpcError as exc:
                raise await self._why(exc) from None

        async def write(frames: pb.Frames) -> None:
            try:
                await stream.write(frames)
            except (asyncio.InvalidStateError, grpc.aio.AioRpcError):  # the call ended under the write: why?
                code, details, trailers = await stream.code(), await stream.details(), await stream.trailing_metadata()
                why = await self._why(grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailers, details=details))
                if why.code() is grpc.StatusCode.UNAUTHENTICATED:
                    raise why from None  # refused: say so (anything else stays as it was, transient or not)
                raise

        await session.run(read, write, describe)

    async def _why(self, error: grpc.aio.AioRpcError) -> grpc.aio.AioRpcError:
        """What ended a stream: ``error``, unless gRPC masked the worker's refusal.

        A worker that refuses a stream (no secret) ends it at once; a write
        racing that end fails inside gRPC, which then reports INTERNAL
        ("Internal error from Core") instead of the worker's status. A State
        call (unary: nothing races it) asks the worker what it says.
        """
        if error.code() is not grpc.StatusCode.INTERNAL:
            return error
        try:
            await self._state(pb.StateRequest(), timeout=WHY_TIMEOUT_S, metadata=self._metadata)
        except grpc.aio.AioRpcError as refusal:
            if refusal.code() is grpc.StatusCode.UNAUTHENTICATED:
                return refusal
        return error

    @staticmethod
    def failure(reason: BaseException) -> tuple[str, str]:
        """The status code and detail of what ended a stream."""
        if isinstance(reason, grpc.aio.AioRpcError):
            return reason.code().name, reason.details() or ""
        return "UNAVAILABLE", str(reason)  # the stream died under us: the peer is gone, for now

    async def state(self, timeout: float) -> pb.WorkerState:
        """The worker's State call."""
        return await self._state(pb.StateRequest(), timeout=timeout, metadata=self._metadata)

    async def stop(self, grace: float, timeout: float) -> pb.WorkerState:
        """The worker's Stop call: drain (``grace`` s for calls in flight) and exit."""
        return await self._stop(pb.StopRequest(grace=grace), timeout=timeout, metadata=self._metadata)

    async def close(self) -> None:
        """Close the channel now."""
        await self._channel.close(grace=None)
