"""Frames waiting to leave on one stream, sent in batches by one writer task (see `_session`).

Whatever the event loop produced in one turn leaves in one message: a
burst of dispatches, or several routines finishing, costs one write. Where
the transport can take a message without waiting (`WriteNow`: a unix
socket whose buffer is not full), that write happens in a callback at the
end of the turn; only a transport that must be awaited (gRPC, a full
socket) wakes the writer task.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, Protocol

from ._proto import leakypool_pb2 as pb

SLOW_WRITE_S: Final[float] = 0.01
"""An awaited write that took longer than this carried a large message (or met a full window): its end is noted."""

Write = Callable[[pb.Frames], Awaitable[None]]
WriteNow = Callable[[pb.Frames], bool]
"""Sends one message at once, or returns False if it cannot without waiting."""


class Spill(Protocol):
    """Messages that must leave before the batch being built (`_chunks.Spill`: a large value's chunks)."""

    def frames(self) -> Iterator[pb.Frames]:
        """The messages, made one at a time as they are sent."""
        ...

    def close(self) -> None:
        """Sent, or the stream is gone: let go of what they were made from."""
        ...


class Outbox:
    """Frames waiting to leave on one stream; one writer task sends them in batches.

    Frames are built in place inside the next batch (`frame`), so a large
    value is copied into the message once, not once per wrapping message.
    """

    __slots__ = (
        "_backstop",
        "_batch",
        "_closing",
        "_flush_soon",
        "_held",
        "_ready",
        "_spills",
        "_write_now",
        "taken",
        "writing",
        "written",
        "wrote_at",
    )

    def __init__(self) -> None:
        self._batch = pb.Frames()
        self._spills: list[Spill] = []  # sent, in order, before the batch being built
        self._ready = asyncio.Event()  # wakes the writer task
        self._closing = False
        self._write_now: WriteNow | None = None
        self._flush_soon = False  # a `_flush` is scheduled for the end of this turn
        self._backstop: asyncio.TimerHandle | None = None  # sends held frames (see `hold`)
        self._held: dict[int, pb.Frame] = {}  # call id -> its held frame, in the batch being built
        self.taken = (
            0  # batches taken to be written so far (the one being written included; read, never written outside)
        )
        self.written = 0  # batches handed to the transport so far
        self.writing = False  # `pump` awaits a write now
        self.wrote_at = float("-inf")  # loop time the last slow write (`SLOW_WRITE_S`) ended

    @property
    def batch_number(self) -> int:
        """The number of the batch being built (it has left once `written` reaches it).

        Batches are numbered when taken, not when written: while one is being
        written (an awaited gRPC write), frames go into the next batch, whose
        number is one more.
        """
        return self.taken + 1

    def frame(self, call_id: int) -> pb.Frame:
        """A new frame for ``call_id`` in the next batch; fill it in before yielding to the loop."""
        frame = self._batch.frames.add()
        frame.id = call_id
        self._wake()
        return frame

    def queued(self) -> list[pb.Frame]:
        """The frames of the batch being built (not yet handed to the transport)."""
        return list(self._batch.frames)

    def spill(self, spill: Spill) -> None:
        """Send ``spill``'s messages before the batch being built (the frame they belong to is in it).

        Only for a transport the writer task awaits (gRPC: `pump` has no
        ``write_now``), so no batch leaves ahead of them. The outbox closes
        the spill once its messages are sent, or the stream is gone.
        """
        self._spills.append(spill)
        self._ready.set()

    def hold(self, call_id: int, at_most_s: float) -> pb.Frame:
        """A frame that waits for company: it leaves with the next frame sent, or after ``at_most_s``.

        For a worker's Accept: the outcome of a call that ends at once
        joins it, and both cost one write (and one wake-up of the peer).
        """
        frame = self._batch.frames.add()
        frame.id = call_id
        self._held[call_id] = frame
        if self._backstop is None:
            self._backstop = asyncio.get_running_loop().call_later(at_most_s, self._backstop_fired)
        return frame

    def take_held(self, call_id: int) -> pb.Frame | None:
        """``call_id``'s held frame, if it has not left yet, for its caller to turn into what follows it.

        A call that ends while its Accept is held sends its outcome in the
        Accept's place: an outcome says the worker took the call, and one
        frame crosses instead of two (the peer reads an outcome without an
        Accept as both: `_calls.judge_first`).
        """
        frame = self._held.pop(call_id, None)
        if frame is not None:
            self._wake()
        return frame

    def release(self) -> None:
        """Send what is held now (see `hold`)."""
        if self._batch.frames:
            self._wake()

    def _backstop_fired(self) -> None:
        self._backstop = None
        self.release()

    def _wake(self) -> None:
        if self._write_now is None:
            self._ready.set()
        elif not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    @property
    def empty(self) -> bool:
        """Whether every frame added so far was handed to the transport (none waits here or in the writer task)."""
        return not self._batch.frames and not self._ready.is_set() and self.written == self.taken

    def _flush(self) -> None:
        """The end of a turn: write the batch at once if the transport takes it, else wake the writer task."""
        self._flush_soon = False
        if self._ready.is_set():
            return  # the writer task has it
        write_now, batch = self._write_now, self._batch
        if write_now is None:
            return  # the stream is over
        if batch.frames:
            if not write_now(batch):
                self._ready.set()
                return
            self._batch = pb.Frames()
            self._held.clear()
            self.taken += 1
            self.written = self.taken  # in order: any batch the writer task holds was handed over before it waits

    def flush_through(self, write_now: WriteNow) -> None:
        """Send the batch now (held frames too) through ``write_now``, from outside the loop's turn.

        For a worker's watch thread (`pool._worker._overrun`), whose frames
        cannot wait for the end of a turn the main loop is stuck in. A batch
        the writer task already has (a full socket) is left to it.
        """
        batch = self._batch
        if not batch.frames or self._ready.is_set() or self._write_now is None:
            return
        if write_now(batch):
            self._batch = pb.Frames()
            self._held.clear()
            self.taken += 1
            self.written = self.taken

    def close(self) -> None:
        """Send what is queued, then make `pump` return."""
        self._closing = True
        self._ready.set()  # the writer task sends the rest, then returns

    async def pump(self, write: Write, write_now: WriteNow | None = None) -> None:
        """Send batches until closed (and flushed), cancelled, or ``write`` fails.

        The wake-up runs after the callbacks that were ready when the first
        frame arrived, so whatever they add (a burst of dispatches, several
        routines finishing) leaves in the same message. With ``write_now``,
        batches leave from `_flush` and this task only sends what had to wait.
        """
        self._write_now = write_now
        if write_now is not None and self._batch.frames:
            self._wake()
        try:
            while True:
                await self._ready.wait()
                batch, self._batch = self._batch, pb.Frames()
                self._held.clear()
                spills, self._spills = self._spills, []
                self._ready.clear()
                number = 0
                if batch.frames:
                    self.taken += 1  # numbered now: calls opened while its spills go out belong to the next
                    number = self.taken
                try:
                    for spill in spills:
                        for message in spill.frames():
                            await self._write(write, message)
                        spill.close()
                finally:
                    for spill in spills:
                        spill.close()  # the stream failed mid-way: the rest will never leave
                if number:
                    await self._write(write, batch)
                    self.written = max(self.written, number)  # `_flush` may have sent later ones meanwhile
                if self._closing and not self._batch.frames:
                    return
        finally:
            self._write_now = None
            self.writing = False
            spills, self._spills = self._spills, []
            for spill in spills:
                spill.close()
            if self._backstop is not None:
                self._backstop.cancel()
                self._backstop = None

    async def _write(self, write: Write, batch: pb.Frames) -> None:
        """Await one write, noting while it lasts and when a slow one ended (see `busy_at`)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.writing = True
        try:
            await write(batch)
        finally:
            self.writing = False
        ended = loop.time()
        if ended - started > SLOW_WRITE_S:
            self.wrote_at = ended

    def busy_at(self, now: float) -> float:
        """When a batch was last mid-write: ``now`` while one is, else when the last slow one ended.

        For a transport that cannot tell how far a write has got (gRPC hands
        the whole message over, then reports it sent): a call behind a large
        message is not timed until that message has left.
        """
        return now if self.writing else self.wrote_at
