"""Frames waiting to leave on one stream, sent in batches by one writer task (see `_session`).

Whatever the event loop produced in one turn leaves in one message: a
burst of dispatches, or several routines finishing, costs one write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ._proto import leakypool_pb2 as pb

_log = logging.getLogger("leakypool.session")

Write = Callable[[pb.Frames], Awaitable[None]]


class Outbox:
    """Frames waiting to leave on one stream; one writer task sends them in batches.

    Frames are built in place inside the next batch (`frame`), so a large
    value is copied into the message once, not once per wrapping message.
    """

    __slots__ = ("_batch", "_after", "_ready", "_closing")

    def __init__(self) -> None:
        self._batch = pb.Frames()
        self._after: list[Callable[[], None]] = []  # to run once the next batch has been written
        self._ready = asyncio.Event()
        self._closing = False

    def after_write(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the batch being built has been handed to the transport.

        Also runs if the stream fails first (so whatever waits on it learns of
        the failure), never before the batch's frames left.
        """
        self._after.append(callback)
        self._ready.set()

    def frame(self, call_id: int) -> pb.Frame:
        """A new frame for ``call_id`` in the next batch; fill it in before yielding to the loop."""
        frame = self._batch.frames.add()
        frame.id = call_id
        self._ready.set()
        return frame

    def close(self) -> None:
        """Send what is queued, then make `pump` return."""
        self._closing = True
        self._ready.set()

    async def pump(self, write: Write) -> None:
        """Send batches until closed (and flushed), cancelled, or ``write`` fails.

        The wake-up runs after the callbacks that were ready when the first
        frame arrived, so whatever they add (a burst of dispatches, several
        routines finishing) leaves in the same message.
        """
        after: list[Callable[[], None]] = []
        try:
            while True:
                await self._ready.wait()
                batch, self._batch = self._batch, pb.Frames()
                after, self._after = self._after, []
                self._ready.clear()
                if batch.frames:
                    await write(batch)
                _run_all(after)
                after = []
                if self._closing and not self._batch.frames:
                    return
        finally:
            _run_all(after + self._after)
            self._after = []


def _run_all(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:
            _log.exception("after-write callback %r failed", callback)
