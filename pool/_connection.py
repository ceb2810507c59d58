"""The dispatcher's connection to one worker: a gRPC channel and its stream.

All calls to a worker share one Dispatch stream (a `Session`), opened on
first use and re-opened on the next call after it fails. The first failure
of a stream fails every call in flight on it with `WorkerBroken`; a call
still waiting for Accept learns the gRPC code too, which tells the pool
whether to keep the worker (transient) or evict it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Final

import grpc

from ._calls import Task, open_call
from ._errors import WorkerBroken
from ._proto import leakypool_pb2 as pb
from ._session import CallHost, OutgoingCall, Session
from ._tls import TlsCredentials
from ._worker_service import SERVICE

_log = logging.getLogger("leakypool.pool")

CHANNEL_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    # Notice a peer that vanished without closing its socket (a host that
    # lost power) within ~20 s instead of TCP's minutes.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""Options for every channel to a worker (and, mirrored, for its server)."""


@dataclasses.dataclass(frozen=True)
class WorkerMetadata:
    """What the pool knows of a worker; what balancers read from ``context.workers``.

    Attributes:
        uid: Stable for the worker's life; balancers order by it.
        address: ``host:port`` to dial.
        pid: Its process id (on its own host).
        version: leakypool version it runs.
        tags: Labels an operator gave it (``--tags``).
        capacity: Tasks it takes at once (0 = unlimited or unknown).
        tls: Whether it serves TLS.
        local: Whether this pool spawned it.
    """

    uid: uuid.UUID
    address: str
    pid: int = 0
    version: str = ""
    tags: frozenset[str] = frozenset()
    capacity: int = 0
    tls: bool = False
    local: bool = False


class WorkerConnection:
    """A channel to one worker and the stream its calls share.

    Args:
        metadata: The worker.
        host: Serves calls the worker opens back (nested dispatch).
        credentials: TLS client credentials, for a worker that serves TLS.
        on_room: Called when the worker says it has room again.
    """

    def __init__(
        self,
        metadata: WorkerMetadata,
        host: CallHost | None,
        credentials: TlsCredentials | None = None,
        on_room: Callable[[pb.Room], None] | None = None,
    ) -> None:
        self.metadata = metadata
        self._host = host
        self._on_room = on_room
        if credentials is not None:
            self._channel = grpc.aio.secure_channel(
                metadata.address,
                credentials.channel_credentials(),
                options=CHANNEL_OPTIONS + credentials.channel_options(),
            )
        else:
            self._channel = grpc.aio.insecure_channel(metadata.address, options=CHANNEL_OPTIONS)
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
        self._session: Session | None = None
        self._streams: set[asyncio.Task[None]] = set()
        self._label = f"worker {metadata.uid} at {metadata.address}"
        self._retiring = False
        self._closing: asyncio.Task[None] | None = None
        self.closed = False

    @property
    def in_flight(self) -> int:
        """Calls this pool has open on the worker now."""
        session = self._session
        return 0 if session is None or session.failure is not None else session.open_calls

    async def start(self, task: Task) -> OutgoingCall:
        """Send ``task`` to the worker; return once it accepted.

        Raises:
            WorkerRejected: it declined (busy, draining): transient.
            WorkerBroken: the stream failed; ``code`` says how.
        """
        session = self._live_session()
        return await open_call(session, task)

    def retire(self) -> None:
        """Take no more calls; close once the calls in flight have ended.

        For a worker that left gracefully (withdrawn, idle, draining): its
        last calls still deliver their results.
        """
        self._retiring = True
        session = self._session
        if session is not None and session.failure is None:
            for call in session.open_calls_list():
                call.on_finish(self._call_done)
        self._call_done(None)

    def _call_done(self, call: OutgoingCall | None) -> None:
        if self._retiring and self.in_flight == 0 and self._closing is None:
            self._closing = asyncio.ensure_future(self.close())

    def _live_session(self) -> Session:
        session = self._session
        if session is None or session.failure is not None:
            session = self._session = Session(odd=True, host=self._host, label=self._label, on_room=self._on_room)
            stream = self._open_stream()
            runner = asyncio.ensure_future(session.run(stream.read, stream.write, self._describe))
            runner.add_done_callback(self._streams.discard)
            self._streams.add(runner)
        return session

    def _describe(self, reason: BaseException) -> WorkerBroken:
        if isinstance(reason, grpc.aio.AioRpcError):
            code = reason.code().name
            detail = reason.details() or ""
        else:
            code, detail = "UNAVAILABLE", str(reason)
        return WorkerBroken(f"lost {self._label}: {code}: {detail}", code)

    async def state(self, timeout: float = 5.0) -> pb.WorkerState:
        """The worker's State RPC."""
        return await self._state(pb.StateRequest(), timeout=timeout)

    async def stop(self, grace: float, timeout: float = 5.0) -> pb.WorkerState:
        """Ask the worker to drain (``grace`` s for in-flight calls) and exit."""
        return await self._stop(pb.StopRequest(grace=grace), timeout=timeout)

    async def close(self) -> None:
        """Close the stream and the channel now; open calls fail with `WorkerBroken`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        for runner in list(self._streams):
            runner.cancel()
        if self._streams:
            await asyncio.wait(self._streams, timeout=5.0)
        await self._channel.close(grace=None)

    def __repr__(self) -> str:
        return f"<WorkerConnection {self._label} in_flight={self.in_flight}>"
