"""The worker service without HTTP/2: its messages, length-prefixed, over a unix socket.

A pool and the workers it spawned share a host, so between them gRPC's
HTTP/2 framing, flow control and header compression are pure cost. This
module carries the same protobuf messages (``_proto/leakypool.proto``)
over a plain stream socket instead. Workers over TCP keep gRPC.

Wire format, per connection::

    dialler -> worker:  hello    "leakypool-local/2 <Method>"   (Dispatch, State, Stop or Buffers)
    then the handshake (`_handshake`): challenge ->, <- answer, proof ->
    then, both ways:    message  = 4-byte big-endian length, then that many bytes (`_framer`)

``Dispatch`` carries `pb.Frames` both ways until either end closes (the
`Session` protocol, as on the gRPC stream). ``Buffers`` is answered with
one message, ``ok``; then the connection carries descriptors of large
buffers (`_buffers.SideChannel`), read outside the event loop. ``State``
and ``Stop`` send one request and get one `pb.WorkerState` back.

Until the dialler proved itself a worker reads only messages of a
handshake's size (the worker's `_gate`): garbage on the socket costs it
nothing, and nothing unauthenticated is read in full. A `MessageStream`
enforces its `limit` on every message; a dialler raises it once the worker
proved itself.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Callable
from typing import Final, cast

from ._framer import Framer, ProtocolError, framed, prefix
from ._proto import leakypool_pb2 as pb
from ._through import Through

HELLO: Final[bytes] = b"leakypool-local/2 "
"""What every connection's first message starts with; the method name follows (/2: the handshake, issue 43)."""

METHODS: Final[frozenset[str]] = frozenset({"Dispatch", "State", "Stop", "Buffers"})
"""The service's methods, as in the gRPC service, and ``Buffers``: the side connection of `_buffers`."""

HELLO_MAX_BYTES: Final[int] = 64
"""Largest first message accepted: a peer that is not ours is cut off before it can make us buffer."""

MESSAGE_MAX_BYTES: Final[int] = (1 << 32) - 1
"""Largest message once the peer proved itself (protobuf's own limit, 2 GiB, comes first)."""

WRITE_HIGH_WATER_BYTES: Final[int] = 4 << 20
"""Outgoing bytes buffered before `MessageStream.send` waits for the socket to drain."""

READ_AHEAD_MESSAGES: Final[int] = 256
"""Messages received but not yet read before the stream stops reading the socket."""

SMALL_MESSAGE_BYTES: Final[int] = 64 << 10
"""Below this size a message and its length leave as one copied buffer (one write, no gather)."""


class MessageStream(asyncio.Protocol):
    """Length-prefixed messages in both directions over one stream connection.

    Incoming messages are split out in `data_received` and queued for
    `receive`; outgoing ones go straight to the transport, and `send` waits
    only while the transport's buffer is over its high-water mark.

    Args:
        limit: The largest message accepted (until `limit` is raised: a
            dialler keeps it at a handshake's size until the worker proved itself).
        received: Bytes already read off the connection (by the worker's
            gate), taken as if they had just arrived.
        read_rest: Keep a copy of the socket, so that a connection lost on a
            write (or a reset) still has everything the peer wrote read before
            it ends (`read_to_end`): a pool learns which queued calls a dead
            worker started.
    """

    def __init__(self, limit: int = MESSAGE_MAX_BYTES, received: bytes = b"", *, read_rest: bool = False) -> None:
        self._framer = Framer(limit)  # whole messages out of what arrives
        self._received = received  # what was read off the connection before this stream took it
        self.transport: asyncio.Transport | None = None
        self._messages: collections.deque[bytes | memoryview] = collections.deque()
        self._deliver = self._messages.append  # (a bound method made once, not per read)
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._ended: BaseException | None = None  # why the connection ended
        self._clean = False  # it ended between messages, on the peer's close
        self._drained: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._sink: Callable[[bytes | memoryview], None] | None = None
        self._fd = -1  # the socket's, once a thread's I/O needed it (`through`)
        self.through = Through(self)  # the socket as other threads use it (their writes and the loop's take turns)
        self._read_rest = read_rest
        self._dup = -1  # the dialler's own copy of the socket, to read a dead peer's last bytes (`read_to_end`)
        self.read_to_end = False  # the connection ended with everything the peer wrote read (`_read_rest`)
        self._in_bytes = 0  # bytes received so far
        self._out_bytes = 0  # bytes handed to the transport so far
        self._moved_mark: tuple[int, int] = (-1, -1)  # (bytes out of the buffer, bytes in) at the last `busy_at`
        self._busy_at = float("-inf")  # when a message was last seen mid-transfer (see `busy_at`)

    @property
    def limit(self) -> int:
        """The largest message accepted (a dialler raises it once the worker proved itself)."""
        return self._framer.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self._framer.limit = limit

    # -- asyncio.Protocol -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        stream = cast("asyncio.Transport", transport)  # a stream's (uvloop's are no asyncio.Transport subclasses)
        self.transport = stream
        stream.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        sock = stream.get_extra_info("socket") if self._read_rest else None
        if sock is not None:
            self._dup = os.dup(sock.fileno())  # shares the socket (and its O_NONBLOCK)
        if self._received:
            received, self._received = self._received, b""
            self.data_received(received)  # before anything the transport reads

    def data_received(self, data: bytes) -> None:
        self._in_bytes += len(data)
        try:
            if self._framer.split(data, self._deliver):
                self._mid_transfer()  # a message that took more than one read just arrived whole
        except ProtocolError as exc:
            self.fail(exc)
            return
        if not self._messages:
            return  # (a message still arriving)
        if self._sink is not None:
            self._to_sink()  # the reader only waits for the end: no wake-up per message
            return
        self._wake()
        if len(self._messages) > READ_AHEAD_MESSAGES and not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.read_to_end = True
        self._end_here(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        with self.through.lock:
            pass  # a thread's write under way ends before the transport closes the socket (its number reused)
        if exc is not None:
            self.read_rest()
        if self._dup >= 0:
            os.close(self._dup)
            self._dup = -1
        self._end_here(exc)
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._mid_transfer()  # a large write has (almost) all left
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- reading and writing ------------------------------------------------------

    def attach(self, sink: Callable[[bytes | memoryview], None]) -> None:
        """From now on hand every message to ``sink`` as it arrives, in the protocol's own callback.

        No reader task wakes up per message; `receive` then only reports the
        end of the connection. What ``sink`` raises ends the connection with
        that error (an undecodable message, say).
        """
        self._sink = sink
        self._to_sink()

    def _to_sink(self) -> None:
        sink, messages = self._sink, self._messages
        while messages and self._ended is None:
            try:
                sink(messages.popleft())  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - a sink's fault ends the stream with that reason
                self.fail(exc)

    async def receive(self) -> bytes | memoryview | None:
        """The next message, or None once the peer closed cleanly.

        Raises:
            ProtocolError: the peer broke the protocol.
            ConnectionError: the connection failed, or closed in the middle of a message.
        """
        while not self._messages:
            if self._ended is not None:
                if self._clean:
                    return None
                raise self._ended
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        message = self._messages.popleft()
        if self._reading_paused and len(self._messages) <= READ_AHEAD_MESSAGES // 2 and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return message

    async def send(self, message: bytes) -> None:
        """Send one message; waits while the socket's outgoing buffer is full.

        Raises:
            ConnectionError: the connection is gone.
        """
        transport = self.transport
        if self._ended is not None or transport is None or transport.is_closing():
            raise ConnectionResetError("the connection is closed")
        await self.through.settled()
        with self.through.lock:
            transport.writelines((prefix(len(message)), message))
        self._out_bytes += 4 + len(message)
        if self._writing_paused:
            if self._drained is None:
                self._drained = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._drained)
            if self._ended is not None:
                raise ConnectionResetError("the connection closed while sending")

    def write_now(self, message: bytes) -> bool:
        """Send one message at once if the socket takes it without waiting; False if it cannot (then `send`)."""
        transport = self.transport
        if self._writing_paused or self._ended is not None or transport is None or transport.is_closing():
            return False
        with self.through.lock:
            if self.through.handing:
                return False  # a thread's bytes are on their way to the transport: `send` waits for them
            if len(message) < SMALL_MESSAGE_BYTES:
                transport.write(framed(message))
            else:
                transport.writelines((prefix(len(message)), message))
        self._out_bytes += 4 + len(message)
        return True

    def busy_at(self) -> float:
        """When a message was last seen mid-transfer on this connection (monotonic; -inf if never).

        "Now" while bytes wait in either direction and some moved since the
        last ask: a large message still being written (the peer reads it)
        or read (the peer writes it). A peer that stopped reading or writing
        moves nothing, so its connection stops counting as busy. The moment
        a large write drained or a large read completed counts too, so the
        peer's answer window (`_calls.AnswerWatch`) starts from there, not
        from when the message was queued.
        """
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None and not transport.is_closing() else 0
        mark = (self._out_bytes - buffered, self._in_bytes)
        if mark != self._moved_mark:
            self._moved_mark = mark
            if buffered or self._framer.held:
                self._mid_transfer()
        return self._busy_at

    def read_rest(self) -> bool:
        """The connection failed (a write to a dead peer, a reset): read what the peer wrote before it went, now.

        Whether that was everything: the kernel keeps what was written to a unix socket, so an end read
        here (EOF, or the reset after the last byte) missed nothing; a peer still there: False. Also for
        a stream's end, before its calls are failed: a failed write ends it before `connection_lost`.
        """
        while not self.read_to_end and self._dup >= 0 and self._ended is None:
            try:
                data = os.read(self._dup, 1 << 20)
            except ConnectionResetError:
                self.read_to_end = True
            except OSError:  # BlockingIOError: the peer did not close (it may write more): not the end
                break
            else:
                self.read_to_end = not data
                if data:
                    self.data_received(data)
        return self.read_to_end

    @property
    def ended(self) -> bool:
        """Whether the connection has ended."""
        return self._ended is not None

    def count_out(self, size: int) -> None:
        """``size`` bytes left by another way than the transport (`through`): counted for `busy_at`."""
        self._out_bytes += size

    def _mid_transfer(self) -> None:
        self._busy_at = time.monotonic()  # the clock of asyncio's (and, to the millisecond, uvloop's) loop.time()

    def fileno(self) -> int:
        """The socket's descriptor (-1 if none): for `through`, whose reads and writes bypass the transport."""
        if self._fd < 0 and self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            self._fd = -1 if sock is None else sock.fileno()
        return self._fd

    def write_frames_now(self, frames: pb.Frames) -> bool:
        """`write_now` for one `pb.Frames` (a `Session`'s writer, when it can write without waiting)."""
        return self.write_now(frames.SerializeToString())

    async def read_frames(self) -> pb.Frames | None:
        """The next `pb.Frames`, or None at a clean end (a `Session` reader)."""
        message = await self.receive()
        return None if message is None else pb.Frames.FromString(message)

    async def write_frames(self, frames: pb.Frames) -> None:
        """Send one `pb.Frames` (a `Session` writer)."""
        await self.send(frames.SerializeToString())

    def close(self) -> None:
        """Close the connection (what was sent still leaves)."""
        if self.transport is not None:
            self.transport.close()

    def __repr__(self) -> str:
        state = "open" if self._ended is None else ("closed" if self._clean else f"failed: {self._ended}")
        return f"<MessageStream {state} queued={len(self._messages)} limit={self._framer.limit}>"

    # -- internals ------------------------------------------------------------------

    def fail(self, exc: BaseException) -> None:
        """End the connection with ``exc`` (an undecodable message; `through`: an error another thread met)."""
        self._end(exc)
        if self.transport is not None:
            self.transport.abort()

    def _end_here(self, exc: Exception | None) -> None:
        if self._ended is not None:
            return
        if exc is None and not self._framer.held:
            self._clean = True
            self._end(ConnectionResetError("the peer closed the connection"))
        elif exc is None:
            self._end(ConnectionResetError(f"the peer closed the connection {self._framer.held} bytes into a message"))
        else:
            self._end(exc)

    def _end(self, exc: BaseException) -> None:
        if self._ended is None:
            self._ended = exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def hello(method: str) -> bytes:
    """The first message of a connection that calls ``method``."""
    return HELLO + method.encode()


def method_of(message: bytes | memoryview | None) -> str | None:
    """The method a connection's first message asks for; None if it is not a hello of ours."""
    if message is None:
        return None
    data = bytes(message)
    if not data.startswith(HELLO):
        return None
    method = data[len(HELLO) :].decode("ascii", "replace")
    return method if method in METHODS else None
