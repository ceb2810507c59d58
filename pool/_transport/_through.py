"""A unix-socket stream as threads other than its loop's use it: the watch thread's reads and writes, a worker's plain thread's writes.

    loop thread    ──write_now / send──┐
    watch thread   ──write_through─────┼── one lock: whole messages, in the order they were written
    plain thread   ──write─────────────┘   (straight to the socket while the transport holds nothing;
                                            else handed to the loop, which writes them next)

The loop's own writes go through its transport; a thread writes straight to
the socket (``os.write``), which is only in order while the transport holds
no bytes of its own: the lock makes the two take turns, and a thread that
finds bytes waiting in the transport hands its message to the loop instead
(`handing`), which writes it before anything else. A worker's plain thread
needs this to say a queued call started *on the wire* before the call begins
(`write` returns True once ``os.write`` has taken every byte): a worker
killed while the call runs has said so, and its pool, reading the socket to
its end, never runs that call again.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Final, Protocol

from ._framer import framed
from ._proto import leakypool_pb2 as pb

PULL_READS: Final[int] = 16
"""Reads one `Through.pull` makes at most (what arrives meanwhile waits for the next)."""

PULL_BYTES: Final[int] = 256 << 10
"""Bytes one read of `Through.pull` takes at most."""

LAND_TIMEOUT_S: Final[float] = 30.0
"""How long `send` waits for a full socket to take a message that must land; then the stream is failed."""

SETTLE_POLL_S: Final[float] = 0.001
"""How often a thread waiting for its handed-over bytes to leave looks again (a full socket: the rare path)."""


class Stream(Protocol):
    """What `Through` needs of its `_framing.MessageStream`."""

    transport: asyncio.Transport | None

    @property
    def ended(self) -> bool: ...

    def fileno(self) -> int: ...

    def fail(self, exc: BaseException) -> None: ...

    def data_received(self, data: bytes) -> None: ...

    def count_out(self, size: int) -> None: ...


class Through:
    """The thread side of one `MessageStream` (its ``through``); the stream's own writes take `lock` too."""

    __slots__ = ("_handed", "_stream", "handing", "lock")

    def __init__(self, stream: Stream) -> None:
        self._stream = stream
        self.lock = threading.RLock()  # (the loop takes it again in `connection_lost`, if a write ends there)
        # Threads' messages waiting for the loop to hand them to the transport (`_hand`), in order. A count,
        # not a flag: while one handed message waits in the loop's queue, the next thread's message must queue
        # behind it too, even if the transport has just taken (and sent) the first. Non-zero: everything else
        # waits behind them. (An attribute, not a property: the loop reads it on every write.)
        self.handing = 0
        self._handed: asyncio.Future[None] | None = None  # the loop's writer waiting for them

    def pull(self) -> None:
        """Read what waits on the socket now and hand it on, as the loop would (`_overrun`'s watch thread).

        Only for a caller that holds the worker's guard while the loop's
        thread runs user code, so nothing else reads this socket meanwhile.
        A transport that is closing may have closed the fd already: left
        alone. A clean end is left for the loop to find; an error read here
        ends the stream now.
        """
        stream = self._stream
        transport, fd = stream.transport, stream.fileno()
        if transport is None or transport.is_closing():
            return
        for _ in range(PULL_READS):
            if stream.ended or fd < 0:
                return
            try:
                data = os.read(fd, PULL_BYTES)
            except (BlockingIOError, InterruptedError):
                return  # nothing waiting
            except OSError as exc:  # the connection failed (the loop would read a clean end now)
                stream.fail(exc)
                return
            if not data:
                return
            stream.data_received(data)

    def write_through(self, frames: pb.Frames) -> bool:
        """Send one `pb.Frames` at once, straight to the socket when nothing is buffered (the watch thread).

        A write queued on the transport would wait for the loop's turn to
        end, which is what the watch thread is there to not wait for. False:
        not sent (the stream is gone, or a thread's message is being handed over).
        """
        stream = self._stream
        transport, fd = stream.transport, stream.fileno()
        if stream.ended or transport is None or transport.is_closing() or fd < 0:
            return False
        data = framed(frames.SerializeToString())
        with self.lock:
            if self.handing:
                return False
            stream.count_out(len(data))
            if transport.get_write_buffer_size() == 0:
                try:
                    data = data[os.write(fd, data) :]
                except BlockingIOError:
                    pass
                except OSError:
                    return True  # the connection failed: the loop finds out and fails the stream
            if data:
                transport.write(data)  # behind nothing else: the order holds (the loop is parked in user code)
        return True

    def write(self, data: bytes, loop: asyncio.AbstractEventLoop) -> bool | None:
        """Write one framed message from a thread that is not the loop's; True once the kernel has all of it.

        None: part of it (or all) had to be handed to the loop (the socket
        was full, or the transport held bytes of its own); it leaves next,
        before anything else: `settle` waits for that. False: the stream is gone.
        """
        stream = self._stream
        transport, fd = stream.transport, stream.fileno()
        if stream.ended or transport is None or transport.is_closing() or fd < 0:
            return False
        with self.lock:
            if stream.ended or transport.is_closing():
                return False  # checked again here: the loop closes the socket only after a turn of this lock
            if self.handing or transport.get_write_buffer_size():
                rest = data
            else:
                try:
                    rest = data[os.write(fd, data) :]
                except BlockingIOError:
                    rest = data
                except OSError:
                    return False
            stream.count_out(len(data))
            if not rest:
                return True
            self.handing += 1
            try:
                loop.call_soon_threadsafe(self._hand, rest)
            except RuntimeError:  # the loop closed: the worker is exiting
                self.handing -= 1
                return False
        return None

    def send(self, frames: pb.Frames, land: bool, loop: asyncio.AbstractEventLoop) -> bool:
        """Send ``frames`` from this thread (`_session.Session.write_from_thread`); False if the stream is gone.

        With ``land``, returns once the kernel has all of it; a socket that
        does not take it within `LAND_TIMEOUT_S` ends the stream (so a worker
        never starts a call whose Started did not leave).
        """
        done = self.write(framed(frames.SerializeToString()), loop)
        if done is None and land and not self.settle(LAND_TIMEOUT_S):
            loop.call_soon_threadsafe(self._stream.fail, TimeoutError("the peer stopped reading"))
            return False
        return done is not False

    def settle(self, timeout: float) -> bool:
        """From the writing thread: wait until what `write` handed over has left for the kernel; False if gone first.

        Polls (`SETTLE_POLL_S`): the rare path of a socket the peer reads slowly.
        """
        stream = self._stream
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            transport = stream.transport
            if stream.ended or transport is None or transport.is_closing():
                return False
            if not self.handing and transport.get_write_buffer_size() == 0:
                return True
            time.sleep(SETTLE_POLL_S)  # the loop's transport drains it
        return False

    def on_wire(self) -> bool:
        """On the loop: whether every byte written so far is in the kernel (none waits in the transport)."""
        transport = self._stream.transport
        with self.lock:
            if self.handing or transport is None or transport.is_closing():
                return False  # (a closing transport holds nothing, and sends nothing more either)
            return transport.get_write_buffer_size() == 0

    def _hand(self, rest: bytes) -> None:
        """On the loop: give a thread's message (what the socket did not take) to the transport, first in line."""
        transport = self._stream.transport
        with self.lock:
            if transport is not None and not transport.is_closing():
                transport.write(rest)
            self.handing -= 1
            if self.handing:
                return  # the next one is queued behind this on the loop: `settled` waits for it too
        handed, self._handed = self._handed, None
        if handed is not None and not handed.done():
            handed.set_result(None)

    async def settled(self) -> None:
        """On the loop: wait while a thread's message is being handed to the transport (it goes first)."""
        while self.handing:
            if self._handed is None:
                self._handed = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._handed)
