"""One multiplexed Dispatch stream, as either end sees it.

A dispatcher and a worker share one long-lived stream (gRPC, or framed
messages on a unix socket: `_framing`) and run many calls over it at once
(see ``_proto/leakypool.proto``). Both ends use this module: a `Session`
routes incoming frames by call id, either to an `OutgoingCall` this end
opened (odd ids on the dispatcher, even ids on the worker) or to the
`CallHost` that serves calls the peer opened. Frames going out are batched
by its `Outbox` (``_outbox``): whatever the event loop produced in one turn
leaves in one message, which is what makes many small calls cheap.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from . import _buffers, _side, _wire
from ._chunks import Assembly, Spill
from ._outbox import Outbox, Write, WriteNow
from ._outgoing import OutgoingCall
from ._proto import leakypool_pb2 as pb
from ._rpc import UNIMPLEMENTED

Read = Callable[[], Awaitable["pb.Frames | object"]]
ThreadWrite = Callable[[pb.Frames, bool, asyncio.AbstractEventLoop], bool]
"""Sends frames from a thread that is not the loop's (`_through.Through.send`): (frames, land, loop) -> sent."""


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


class CallWatch(Protocol):
    """Watches the calls this end opened on a session (`_calls.AnswerWatch`); closed when the session fails."""

    def close(self) -> None: ...


class Session:
    """Both directions of one Dispatch stream.

    Args:
        odd: True on the dispatcher (its calls get odd ids), False on a worker.
        host: Serves calls the peer opens; None refuses them all.
        label: Names the peer in logs and errors.
    """

    def __init__(
        self,
        *,
        odd: bool,
        host: CallHost | None,
        label: str,
        on_room: Callable[[pb.Room], None] | None = None,
    ) -> None:
        self.label = label
        self._on_room = on_room
        self.failure: BaseException | None = None
        self.sent_digests: set[bytes] = set()  # routines whose blob already crossed this stream
        self._mine = 1 if odd else 0
        self._next_id = 1 if odd else 2
        self._outgoing: dict[int, OutgoingCall] = {}
        self._host = host
        self._outbox = Outbox()
        self.watch: CallWatch | None = None  # what times out unanswered calls (`_calls.AnswerWatch`), once needed
        self.holds_accepts: bool = False  # a local (unix socket) stream: the worker holds quick calls' Accepts
        self._transport_busy_at: Callable[[], float] | None = None  # the transport's own view (`run`'s ``busy_at``)
        self._side: Callable[[], _side.SideChannel | None] | None = None  # where large buffers cross (`carry`)
        self._running = False  # `run` has started: the side connection is known
        self._chunks = False  # large buffers cross in chunks on the stream (no side connection: gRPC)
        self._assembly = Assembly()  # what the peer is sending in chunks
        self._lossless = False  # the stream ended with all the peer wrote read (`run`'s ``read_to_end``)
        self._on_wire: Callable[[], bool] | None = None  # what was handed to the transport is in the kernel
        self._thread_write: ThreadWrite | None = None  # frames from another thread, straight to the socket
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def written(self) -> int:
        """Outgoing batches handed to the transport so far."""
        return self._outbox.written

    @property
    def open_calls(self) -> int:
        """Calls this end opened that have not ended."""
        return len(self._outgoing)

    def _frame(self, call_id: int) -> pb.Frame:
        if self.failure is not None:
            return pb.Frame()  # the stream is gone: build it, send nothing
        return self._outbox.frame(call_id)

    def open(self, name: str, *, plain: bool = False) -> tuple[OutgoingCall, pb.Call]:
        """Open a call to ``name`` (``plain``: a plain function's): returns it and its Call message, to fill in now.

        Raises:
            BaseException: the error that already ended this stream.
        """
        if self.failure is not None:
            raise self.failure
        call_id = self._next_id
        self._next_id += 2
        outgoing = OutgoingCall(self, call_id, name, plain=plain)
        outgoing.batch = self._outbox.taken + 1  # (`Outbox.batch_number`, without a call)
        self._outgoing[call_id] = outgoing
        return outgoing, self._outbox.frame(call_id).call

    def carry(self, value: bytes) -> bytes:
        """``value`` as it may go on this stream: a payload's buffers lent to the peer first, or put back in band.

        A value whose large buffers are out of band (`_buffers`) sends its
        region's descriptor over the side connection now, before the frame
        naming it leaves; on a gRPC stream (no side connection) the region
        goes in chunks ahead of that frame (`_chunks`). A payload received
        here and passed on (nested calls) is first copied into a region of
        this process (`_buffers.adopt`); one for a unix stream whose side
        connection is gone is put back in band. Anything else passes as it is
        (one byte looked at).
        """
        if not value or value[0] != _buffers.MARK or not self._running:
            return value  # not a payload; or the stream is not up yet: `run` settles it (`_carry_queued`)
        value = _buffers.adopt(value)  # received here and passed on (nested calls): made our own, not unpickled
        region = _buffers.region_of(value)
        if region is not None and self._chunks and self.failure is None:
            self._outbox.spill(Spill(value, region))
            return value
        side = None if self._side is None else self._side()
        if side is not None and region is not None and side.lend(region):
            return value
        return _wire.inline(value)

    def _carry_queued(self) -> None:
        """Carry the payloads of the calls opened before the stream was up (its side connection unknown then)."""
        for frame in self._outbox.queued():
            if frame.HasField("call") and frame.call.args[:1] == bytes([_buffers.MARK]):
                frame.call.args = self.carry(frame.call.args)

    def step(self, call_id: int, kind: int, value: bytes = b"") -> None:
        """Send a Step for a call this end opened."""
        step = self._frame(call_id).step
        step.kind = kind  # type: ignore[assignment]  # a protobuf enum field takes any int; the generated stub types it as the enum class
        if value:
            step.value = self.carry(value)
        step.SetInParent()

    def accept(self, call_id: int, hold_s: float = 0.0, *, queued: bool = False) -> None:
        """Accept a call the peer opened (``queued``: a plain call that waits behind another, see the proto).

        With ``hold_s``, the Accept waits up to that long for company (see
        `Outbox.hold`): the outcome of a call that ends at once leaves with
        it, in one write; `release` sends it sooner. The dispatcher counts a
        call whose Call frame left and whose stream then failed (the worker
        gone), answered or not, as lost *after* accepting (`WorkerBroken`; but
        for a plain call a dead worker's socket shows never began: `OutgoingCall.lost`):
        a worker that dies while running user code never gets it run twice.
        """
        if hold_s and self.failure is None:
            self._outbox.hold(call_id, hold_s).accept.SetInParent()
        elif queued:
            self._frame(call_id).accept.queued = True
        else:
            self._frame(call_id).accept.SetInParent()

    def accepted_on_wire(self) -> bool:
        """Whether everything this end sent so far, a plain call's Accept among it, is in the kernel.

        If not, the plain thread writes a Started before the call begins (`OutgoingCall.lost`).
        A stream never read to its end (gRPC) needs neither: True.
        """
        if self._on_wire is None or self.failure is not None:
            return self._thread_write is None and self.failure is None
        return self._outbox.empty and self._on_wire()

    def release(self) -> None:
        """Send held Accepts now (a routine started that will not end at once)."""
        self._outbox.release()

    def flush_through(self, write_now: WriteNow) -> None:
        """Send what is queued now, held Accepts too, through ``write_now`` (see `Outbox.flush_through`)."""
        self._outbox.flush_through(write_now)

    def reject(self, call_id: int, code: int, message: str, in_flight: int = 0, capacity: int = 0) -> None:
        """Reject a call the peer opened, with a gRPC status code (and, when busy, the count it was at)."""
        reject = self._frame(call_id).reject
        reject.code = code
        reject.message = message
        if capacity:
            reject.in_flight = in_flight
            reject.capacity = capacity

    def outcome(self, call_id: int, kind: int, value: bytes = b"", traceback: str = "") -> None:
        """Report an outcome of a call the peer opened (in place of its Accept, if that is still held here)."""
        held = self._outbox.take_held(call_id) if self.failure is None else None
        if held is not None:
            held.ClearField("accept")
        outcome = (held or self._frame(call_id)).outcome
        outcome.SetInParent()
        outcome.kind = kind  # type: ignore[assignment]  # a protobuf enum field takes any int; the generated stub types it as the enum class
        if value:
            made_by = _wire.interpreter_of(value)
            if made_by:
                outcome.interpreter = made_by  # code by value: a caller of another Python will not load it
            outcome.value = self.carry(value)
        if traceback:
            outcome.traceback = traceback

    def forward(self, call_id: int, outcome: pb.Outcome) -> None:
        """Pass on an outcome received from elsewhere (nested dispatch)."""
        frame = self._frame(call_id)
        frame.outcome.CopyFrom(outcome)
        if outcome.value and outcome.value[0] == _buffers.MARK:
            frame.outcome.value = self.carry(outcome.value)

    def busy_at(self, now: float) -> float:
        """When a message was last seen mid-transfer on this stream, either way (``now`` if it is).

        The answer window of a call (`_calls.AnswerWatch`) runs from the later
        of its opening and this: it times the peer, not the wire, so a call
        behind a frame that takes longer than the window to write or read is
        not taken for a silent peer. A transport that counts bytes (the unix
        socket: `MessageStream.busy_at`) says so itself; otherwise writes
        the outbox awaited count (gRPC).
        """
        if self._transport_busy_at is not None:
            return self._transport_busy_at()
        return self._outbox.busy_at(now)

    def open_calls_list(self) -> list[OutgoingCall]:
        """The calls this end opened that have not ended."""
        return list(self._outgoing.values())

    def outgoing(self, call_id: int) -> OutgoingCall | None:
        """The open call this end made with id ``call_id``, if any."""
        return self._outgoing.get(call_id)

    def room(
        self, in_flight: int, capacity: int, memory_fraction: float | None = None, loop_lag_s: float = 0.0
    ) -> None:
        """Tell the peer this end has room again (a worker that turned it away), with its resource signals."""
        room = self._frame(0).room
        room.SetInParent()
        room.in_flight = in_flight
        room.capacity = capacity
        room.memory_fraction = memory_fraction or 0.0
        room.loop_lag_seconds = loop_lag_s

    def forget(self, call_id: int) -> None:
        """Stop routing replies for ``call_id`` (it was cancelled here)."""
        self._outgoing.pop(call_id, None)

    def feed_bytes(self, message: bytes | memoryview) -> None:
        """Route every frame of one received message, still serialized (a transport's sink)."""
        self.feed(pb.Frames.FromString(message))

    def feed(self, message: pb.Frames) -> None:
        """Route every frame of one received message."""
        for frame in message.frames:
            call_id = frame.id  # (each protobuf field read costs: read once)
            if call_id == 0:
                if frame.HasField("chunk"):
                    self._assembly.add(frame.chunk)
                elif self._on_room is not None and frame.HasField("room"):
                    self._on_room(frame.room)
            elif call_id & 1 == self._mine:
                outgoing = self._outgoing.get(call_id)
                if outgoing is None:
                    continue  # a reply to a call cancelled here
                if outgoing.reply(frame):
                    self._outgoing.pop(call_id, None)
            elif self._host is None:
                if frame.HasField("call"):
                    self.reject(frame.id, UNIMPLEMENTED, "this end runs no calls")
            elif frame.HasField("call"):
                self._host.on_call(self, frame)
            else:
                self._host.on_step(self, frame)

    def write_from_thread(self, frames: pb.Frames, *, land: bool = False) -> bool:
        """Send ``frames`` from a thread that is not the loop's (a worker's plain thread); False if the stream is gone.

        On a unix socket they go straight to the socket, and with ``land`` this returns once the
        kernel has them (a worker's Started, before the call begins). Over gRPC they join the loop's
        next batch: when they reach the peer is unknown, so a queued call on a lost TCP stream is lost.
        """
        loop = self._loop
        if self.failure is not None or loop is None:
            return False
        if self._thread_write is not None:
            return self._thread_write(frames, land, loop)
        try:
            loop.call_soon_threadsafe(self._merge, frames)
        except RuntimeError:  # the loop closed: the worker is exiting
            return False
        return True

    def _merge(self, frames: pb.Frames) -> None:  # on the loop: a thread's frames join the next batch
        for frame in frames.frames if self.failure is None else ():
            self._outbox.frame(frame.id).MergeFrom(frame)

    def finish(self) -> None:
        """End the stream cleanly once what is queued has been sent."""
        self._outbox.close()

    def fail(self, exc: BaseException) -> None:
        """The stream is over: fail every open call with ``exc``, stop hosted ones."""
        if self.failure is not None:
            return
        self.failure = exc
        self._assembly.close()
        outgoing, self._outgoing = self._outgoing, {}
        for call in outgoing.values():
            call.lost(exc, lossless=self._lossless)
        watch, self.watch = self.watch, None
        if watch is not None:
            watch.close()  # its timer would keep this dead session alive until it fires
        if self._host is not None:
            self._host.on_session_end(self)

    async def run(
        self,
        read: Read,
        write: Write,
        describe: Callable[[BaseException], BaseException],
        *,
        attach: Callable[[Callable[[bytes | memoryview], None]], None] | None = None,
        write_now: WriteNow | None = None,
        busy_at: Callable[[], float] | None = None,
        side: Callable[[], _side.SideChannel | None] | None = None,
        read_to_end: Callable[[], bool] | None = None,
        thread_write: ThreadWrite | None = None,
        on_wire: Callable[[], bool] | None = None,
    ) -> BaseException:
        """Pump both directions until the stream ends, then `fail` the session; returns what ended it.

        Args:
            read: Returns the next message; anything else (``grpc.aio.EOF``, None) ends the stream.
            write: Sends one message.
            describe: Turns what ended the stream into the error open calls get.
            attach: Where the transport can hand messages over as they arrive (`MessageStream.attach`):
                it gets `feed_bytes`, and ``read`` then only reports the end.
            write_now: Sends one message without waiting, or says it cannot (`MessageStream.write_frames_now`).
            busy_at: When the transport last saw a message mid-transfer (`MessageStream.busy_at`; see `busy_at`).
            side: The side connection large buffers cross to the peer, if it has one now (see `carry`).
            read_to_end: Reads what the peer wrote last; whether that was all (`MessageStream.read_rest`).
            thread_write: How `write_from_thread` reaches the socket (`_through.Through.send`).
            on_wire: Whether every byte handed to the transport is in the kernel (`accepted_on_wire`).

        Returns:
            What ended the stream: a `ConnectionError` for an orderly end, else
            the error reading or writing raised (e.g. an undecodable message).
        """
        reader = asyncio.current_task()
        assert reader is not None  # noqa: S101 - an invariant, stated for the type checker
        self.holds_accepts = write_now is not None
        self._loop = asyncio.get_running_loop()
        self._thread_write = thread_write
        self._on_wire = on_wire
        self._transport_busy_at = busy_at
        self._side = side
        self._chunks = write_now is None and side is None
        if self._chunks:
            _side.expect()  # large values go out of band from now on: in chunks on this stream
        self._running = True
        self._carry_queued()
        writer = asyncio.ensure_future(self._outbox.pump(write, write_now))

        def writer_done(task: asyncio.Future[None]) -> None:
            if not task.cancelled():
                reader.cancel()  # failed, or finished: the read loop below learns which

        writer.add_done_callback(writer_done)
        reason: BaseException = ConnectionResetError(f"{self.label}: stream closed")
        try:
            if attach is not None:
                attach(self.feed_bytes)
            while isinstance(message := await read(), pb.Frames):
                self.feed(message)
        except asyncio.CancelledError:
            if not writer.done() or writer.cancelled():
                reason = ConnectionAbortedError(f"{self.label}: stream cancelled")
                raise
            reader.uncancel()
            reason = writer.exception() or ConnectionResetError(f"{self.label}: stream finished")
        except Exception as exc:  # noqa: BLE001 - any end of the stream is the reason every open call is failed with
            reason = exc
        finally:
            writer.remove_done_callback(writer_done)
            writer.cancel()
            # a dead peer's last bytes count, even if a failed write ended the stream before they were read
            self._lossless = read_to_end is not None and read_to_end()
            self.fail(describe(reason))
        return reason
