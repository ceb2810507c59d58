"""The dispatcher's connection to one worker: a channel and its stream.

The channel is gRPC (`GrpcChannel`) for a worker at ``host:port``, and
length-prefixed messages on a unix socket (`UnixChannel`, see `_framing`)
for one at ``unix:PATH``, which is how a pool reaches the workers it spawned.

All calls to a worker share one Dispatch stream (a `Session`), opened on
first use and re-opened on the next call after it fails. The first failure
of a stream fails every call in flight on it with `WorkerBroken`. A call
whose Call frame had not left yet when its stream failed with a transient
code (the worker is unreachable, for now) gets `WorkerRejected` instead
(see `judge_first`): the pool keeps the worker and moves on; any other
failure is `WorkerBroken`, and the pool evicts the worker.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._base import TaskOwner
from .._errors import WorkerBroken
from .._transport import CallHost, OutgoingCall, Session, TlsCredentials, Trust, UnixChannel, WorkerMetadata
from .._transport import leakypool_pb2 as pb
from ._calls import start_call
from ._task import CallRecord

if TYPE_CHECKING:
    from .._transport import GrpcChannel

_log = logging.getLogger("leakypool.pool")


def open_channel(
    address: str, trust: Trust, uid: uuid.UUID | None = None, credentials: TlsCredentials | None = None
) -> GrpcChannel | UnixChannel:
    """A channel to the worker at ``address``: ``unix:PATH`` (framed messages) or ``host:port`` (gRPC).

    Every connection it opens proves both ends (`_handshake`) before
    anything else crosses; ``uid`` is the worker it must prove to be (None:
    any, for a probe that asks who is there).
    """
    if address.startswith("unix:"):
        return UnixChannel(address.removeprefix("unix:"), trust, uid)
    from .._transport import GrpcChannel

    return GrpcChannel(address, trust, uid, credentials)


class WorkerConnection:
    """A channel to one worker and the stream its calls share.

    Args:
        metadata: The worker.
        host: Serves calls the worker opens back (nested dispatch).
        trust: What this pool proves itself with, and whom it trusts.
        credentials: TLS client credentials, to dial it with TLS.
        on_room: Called with the worker's uid when it says it has room again (its Room
            frame), or with None when a stream ends (what the worker knew of this pool is gone).
    """

    def __init__(
        self,
        metadata: WorkerMetadata,
        host: CallHost | None,
        trust: Trust,
        credentials: TlsCredentials | None = None,
        on_room: Callable[[uuid.UUID, pb.Room | None], None] | None = None,
    ) -> None:
        self.metadata = metadata
        self._host = host
        self._on_room = on_room
        self.last_room: pb.Room | None = None  # the worker's load and signals when it last said "room"
        self._channel = open_channel(metadata.address, trust, metadata.uid, credentials)
        self._session: Session | None = None
        self._label = f"worker {metadata.uid} at {metadata.address}"
        self._streams = TaskOwner(self._label, _log)
        self._on_idle: Callable[[WorkerConnection], None] | None = None
        self.closed = False

    @property
    def in_flight(self) -> int:
        """Calls this pool has open on the worker now."""
        session = self._session
        return 0 if session is None or session.failure is not None else session.open_calls

    @property
    def broken(self) -> bool:
        """Whether its last stream failed (the worker may be unreachable)."""
        return self._session is not None and self._session.failure is not None

    def open(self, task: CallRecord) -> OutgoingCall:
        """Send ``task`` to the worker now; its first answer (`judge_first`) says whether the worker took it.

        Raises:
            BaseException: what ended a stream that cannot be opened again.
        """
        session = self._session
        if session is None or session.failure is not None:
            session = self._live_session()
        return start_call(session, task)

    def retire(self, on_idle: Callable[[WorkerConnection], None]) -> None:
        """Take no more calls; once the calls in flight have ended, hand itself to ``on_idle`` to close.

        For a worker that left gracefully (withdrawn, idle, draining): its
        last calls still deliver their results.
        """
        self._on_idle = on_idle
        session = self._session
        if session is not None and session.failure is None:
            for call in session.open_calls_list():
                call.on_finish(self._call_done)
        self._call_done(None)

    def _call_done(self, call: OutgoingCall | None) -> None:
        if call is not None:  # its session still counts it (it lets go of a call once its end was handed on)
            asyncio.get_running_loop().call_soon(self._call_done, None)
            return
        on_idle = self._on_idle
        if on_idle is not None and self.in_flight == 0:
            self._on_idle = None
            on_idle(self)

    def connect(self) -> None:
        """Open the stream now, before the first call needs it (its handshake is then out of that call's way)."""
        self._live_session()

    def _live_session(self) -> Session:
        session = self._session
        if session is None or session.failure is not None:
            session = self._session = Session(odd=True, host=self._host, label=self._label, on_room=self._room)
            self._streams.spawn(self._run(session), name="stream")
        return session

    async def _run(self, session: Session) -> None:
        try:
            await self._channel.run(session, self._describe)
        finally:
            # The worker's memory of turning this stream away ended with it: no Room
            # will come for it, so this pool must not go on thinking the worker full.
            if self._on_room is not None:
                self._on_room(self.metadata.uid, None)

    def _describe(self, reason: BaseException) -> WorkerBroken:
        code, detail = self._channel.failure(reason)
        if code == "UNAUTHENTICATED" and not self.closed:
            _log.error(
                "%s failed the handshake (no call, no routine sent; nothing it sent read): %s", self._label, detail
            )
        return WorkerBroken(f"lost {self._label}: {code}: {detail}", code)

    async def state(self, timeout: float = 5.0) -> pb.WorkerState:
        """The worker's State call."""
        return await self._channel.state(timeout)

    async def stop(self, grace: float, timeout: float = 5.0) -> pb.WorkerState:
        """Ask the worker to drain (``grace`` s for in-flight calls) and exit."""
        return await self._channel.stop(grace, timeout)

    def _room(self, room: pb.Room) -> None:
        self.last_room = room
        if self._on_room is not None:
            self._on_room(self.metadata.uid, room)

    async def close(self) -> None:
        """Close the stream and the channel now; open calls fail with `WorkerBroken`. Idempotent."""
        if self.closed:
            return
        self.closed = True
        await self._streams.aclose()
        await self._channel.close()

    def __repr__(self) -> str:
        return f"<WorkerConnection {self._label} in_flight={self.in_flight}>"
