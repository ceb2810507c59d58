"""A worker reached over gRPC (TCP, optionally mutual TLS): workers on the LAN, or local ones over TCP."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from ._proto import leakypool_pb2 as pb
from ._rpc import CHANNEL_OPTIONS, SERVICE
from ._session import Session
from ._tls import TlsCredentials


class GrpcChannel:
    """One gRPC channel to a worker: its Dispatch stream and its State and Stop calls.

    Args:
        address: ``host:port``.
        credentials: TLS client credentials, for a worker that serves TLS.
    """

    def __init__(self, address: str, credentials: TlsCredentials | None = None) -> None:
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
        stream = self._open_stream()
        await session.run(stream.read, stream.write, describe)

    @staticmethod
    def failure(reason: BaseException) -> tuple[str, str]:
        """The status code and detail of what ended a stream."""
        if isinstance(reason, grpc.aio.AioRpcError):
            return reason.code().name, reason.details() or ""
        return "UNAVAILABLE", str(reason)  # the stream died under us: the peer is gone, for now

    async def state(self, timeout: float) -> pb.WorkerState:
        """The worker's State call."""
        return await self._state(pb.StateRequest(), timeout=timeout)

    async def stop(self, grace: float, timeout: float) -> pb.WorkerState:
        """The worker's Stop call: drain (``grace`` s for calls in flight) and exit."""
        return await self._stop(pb.StopRequest(grace=grace), timeout=timeout)

    async def close(self) -> None:
        """Close the channel now."""
        await self._channel.close(grace=None)
