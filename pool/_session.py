"""One multiplexed Dispatch stream, as either end sees it.

A dispatcher and a worker share one long-lived gRPC stream and run many
calls over it at once (see ``_proto/leakypool.proto``). Both ends use this
module: a `Session` routes incoming frames by call id, either to an
`OutgoingCall` this end opened (odd ids on the dispatcher, even ids on the
worker) or to the `CallHost` that serves calls the peer opened. Frames
going out are batched: whatever the event loop produced in one turn leaves
in one gRPC message, which is what makes many small calls cheap.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

import grpc

from ._proto import leakypool_pb2 as pb

_log = logging.getLogger("leakypool.session")

FINAL_OUTCOMES: Final[frozenset[int]] = frozenset(
    {pb.Outcome.RETURN, pb.Outcome.RAISE, pb.Outcome.STOP, pb.Outcome.CANCELLED}
)
"""Outcome kinds after which a call is over (YIELD is the only other)."""

Read = Callable[[], Awaitable["pb.Frames | object"]]
Write = Callable[[pb.Frames], Awaitable[None]]


class CallHost(Protocol):
    """Serves the calls a peer opens on a session (the callee role)."""

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        """A peer opened call ``frame.id``; reply Accept or Reject, then run it."""
        ...

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        """The peer drives (or cancels) call ``frame.id``."""
        ...

    def on_session_end(self, session: Session) -> None:
        """The stream is gone: stop every call the peer opened on it."""
        ...


class Outbox:
    """Frames waiting to leave on one stream; one writer task sends them in batches."""

    __slots__ = ("_frames", "_ready", "_closing")

    def __init__(self) -> None:
        self._frames: list[pb.Frame] = []
        self._ready = asyncio.Event()
        self._closing = False

    def put(self, frame: pb.Frame) -> None:
        """Queue ``frame``; it leaves with the next batch."""
        self._frames.append(frame)
        self._ready.set()

    def close(self) -> None:
        """Send what is queued, then make `pump` return."""
        self._closing = True
        self._ready.set()

    async def pump(self, write: Write) -> None:
        """Send batches until closed (and flushed), cancelled, or ``write`` fails."""
        while True:
            await self._ready.wait()
            # One more loop turn lets tasks that are ready right now (a
            # routine finishing, a burst of dispatches) join this batch.
            await asyncio.sleep(0)
            frames, self._frames = self._frames, []
            self._ready.clear()
            if frames:
                await write(pb.Frames(frames=frames))
            if self._closing and not self._frames:
                return


class OutgoingCall:
    """A call this end opened: its replies arrive here, in order.

    ``receive`` returns the next reply frame (Accept, Reject, Outcome) or
    raises the error that ended the stream. Only one task awaits a call at
    a time; the protocol is lock-step.
    """

    __slots__ = ("id", "session", "name", "finished", "_inbox", "_waiter", "_on_finish")

    def __init__(self, session: Session, call_id: int, name: str) -> None:
        self.id = call_id
        self.session = session
        self.name = name
        self.finished = False
        self._inbox: collections.deque[pb.Frame | BaseException] = collections.deque()
        self._waiter: asyncio.Future[pb.Frame | BaseException] | None = None
        self._on_finish: list[Callable[[OutgoingCall], None]] = []

    def on_finish(self, callback: Callable[[OutgoingCall], None]) -> None:
        """Run ``callback(self)`` once, when the call ends for any reason."""
        if self.finished:
            callback(self)
        else:
            self._on_finish.append(callback)

    def deliver(self, item: pb.Frame | BaseException) -> None:
        """Hand a reply (or the stream's failure) to whoever awaits the call."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._waiter = None
            waiter.set_result(item)
        else:
            self._inbox.append(item)
        if isinstance(item, BaseException) or _is_final(item):
            self._finish()

    async def receive(self) -> pb.Frame:
        """The next reply frame. Raises what ended the stream, if it ended."""
        if self._inbox:
            item = self._inbox.popleft()
        else:
            self._waiter = asyncio.get_running_loop().create_future()
            item = await self._waiter
        if isinstance(item, BaseException):
            raise item
        return item

    def step(self, kind: int, value: bytes = b"") -> None:
        """Drive a generator call: NEXT, SEND(value), THROW(value), CLOSE."""
        self.session.send(pb.Frame(id=self.id, step=pb.Step(kind=kind, value=value)))

    def cancel(self) -> None:
        """Ask the callee to cancel the call; forget it here at once."""
        if not self.finished:
            self.session.send(pb.Frame(id=self.id, step=pb.Step(kind=pb.Step.CANCEL)))
            self.session.forget(self.id)
            self._finish()

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        callbacks, self._on_finish = self._on_finish, []
        for callback in callbacks:
            callback(self)


def _is_final(frame: pb.Frame) -> bool:
    body = frame.WhichOneof("body")
    return body == "reject" or (body == "outcome" and frame.outcome.kind in FINAL_OUTCOMES)


class Session:
    """Both directions of one Dispatch stream.

    Args:
        odd: True on the dispatcher (its calls get odd ids), False on a worker.
        host: Serves calls the peer opens; None refuses them all.
        label: Names the peer in logs and errors.
    """

    def __init__(self, *, odd: bool, host: CallHost | None, label: str) -> None:
        self.label = label
        self.failure: BaseException | None = None
        self.sent_digests: set[bytes] = set()
        self.received: dict[bytes, Any] = {}  # routines the peer sent, by digest
        self.hosted: dict[int, Any] = {}  # calls the peer opened that run here, by id
        self._mine = 1 if odd else 0
        self._next_id = 1 if odd else 2
        self._outgoing: dict[int, OutgoingCall] = {}
        self._host = host
        self._outbox = Outbox()
        self._finishing = False

    @property
    def open_calls(self) -> int:
        """Calls this end opened that have not ended."""
        return len(self._outgoing)

    def send(self, frame: pb.Frame) -> None:
        """Queue a frame for the peer (dropped once the stream has failed)."""
        if self.failure is None:
            self._outbox.put(frame)

    def open(self, call: pb.Call) -> OutgoingCall:
        """Open a call: send ``call``; its replies go to the returned object.

        Raises:
            BaseException: the error that already ended this stream.
        """
        if self.failure is not None:
            raise self.failure
        call_id = self._next_id
        self._next_id += 2
        outgoing = OutgoingCall(self, call_id, call.routine.name)
        self._outgoing[call_id] = outgoing
        self._outbox.put(pb.Frame(id=call_id, call=call))
        return outgoing

    def forget(self, call_id: int) -> None:
        """Stop routing replies for ``call_id`` (it was cancelled here)."""
        self._outgoing.pop(call_id, None)

    def feed(self, message: pb.Frames) -> None:
        """Route every frame of one received message."""
        for frame in message.frames:
            if frame.id & 1 == self._mine:
                outgoing = self._outgoing.get(frame.id)
                if outgoing is None:
                    continue  # a reply to a call cancelled here
                if _is_final(frame):
                    del self._outgoing[frame.id]
                outgoing.deliver(frame)
            elif self._host is None:
                if frame.HasField("call"):
                    self.send(_refuse(frame.id))
            elif frame.HasField("call"):
                self._host.on_call(self, frame)
            else:
                self._host.on_step(self, frame)

    def finish(self) -> None:
        """End the stream cleanly once what is queued has been sent."""
        self._finishing = True
        self._outbox.close()

    def fail(self, exc: BaseException) -> None:
        """The stream is over: fail every open call with ``exc``, stop hosted ones."""
        if self.failure is not None:
            return
        self.failure = exc
        outgoing, self._outgoing = self._outgoing, {}
        for call in outgoing.values():
            call.deliver(exc)
        if self._host is not None:
            self._host.on_session_end(self)

    async def run(self, read: Read, write: Write, describe: Callable[[BaseException], BaseException]) -> None:
        """Pump both directions until the stream ends, then `fail` the session.

        Args:
            read: Returns the next message, or ``grpc.aio.EOF``.
            write: Sends one message.
            describe: Turns what ended the stream into the error open calls get.
        """
        reader = asyncio.current_task()
        assert reader is not None
        writer = asyncio.ensure_future(self._outbox.pump(write))

        def writer_done(task: asyncio.Future[None]) -> None:
            if not task.cancelled():
                reader.cancel()  # failed, or finished: the read loop below learns which

        writer.add_done_callback(writer_done)
        reason: BaseException = ConnectionResetError(f"{self.label}: stream closed")
        try:
            while (message := await read()) is not grpc.aio.EOF:
                self.feed(message)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            if not writer.done() or writer.cancelled():
                reason = ConnectionAbortedError(f"{self.label}: stream cancelled")
                raise
            reader.uncancel()
            reason = writer.exception() or ConnectionResetError(f"{self.label}: stream finished")
        except Exception as exc:
            reason = exc
        finally:
            writer.remove_done_callback(writer_done)
            writer.cancel()
            self.fail(describe(reason))


def _refuse(call_id: int) -> pb.Frame:
    return pb.Frame(
        id=call_id,
        reject=pb.Reject(code=grpc.StatusCode.UNIMPLEMENTED.value[0], message="this end runs no calls"),
    )
