"""The worker service on a unix socket, without HTTP/2: what a pool's own workers serve (see `pool._transport._framing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from typing import Final

from .._base._tasks import TaskOwner
from .._transport import _side
from .._transport._framing import HELLO_MAX_BYTES, MessageStream, ProtocolError, framed, method_of
from .._transport._proto import leakypool_pb2 as pb
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REQUEST_TIMEOUT_S: Final[float] = 10.0
"""How long a new connection may take to say what it wants (its hello, then a State/Stop request) before it is closed."""

WATCH_READ_S: Final[float] = 0.05
"""How long the watch thread waits, in all, for a connection's hello and State request (both are sent
at once, but the dialler may not have run yet when the watch takes its connection)."""

ACCEPTS_PER_PASS: Final[int] = 4
"""Connections the watch thread takes in one pass at most."""

STATE_REQUEST_MAX_BYTES: Final[int] = 1 << 10
"""Largest State request the watch thread reads (the request is empty)."""


def _peer(stream: MessageStream) -> int:
    """The pid of the dispatcher on a stream (0 if unknown): its side connection's key."""
    sock = stream.transport.get_extra_info("socket") if stream.transport is not None else None
    try:
        return 0 if sock is None else _side.peer_pid(sock.fileno())
    except OSError:
        return 0


def _read_message(conn: socket.socket, received: bytearray, limit: int, deadline: float) -> bytes:
    """Read one length-prefixed message from ``conn`` by ``deadline`` (monotonic); ``received`` keeps every byte read.

    Raises:
        ProtocolError: its length is over ``limit``.
        TimeoutError: the deadline came first.
        OSError: the connection ended or failed first.
    """
    size = int.from_bytes(_read_exactly(conn, received, 4, deadline), "big")
    if size > limit:
        raise ProtocolError(f"a {size}-byte message is over this connection's limit of {limit}")
    return _read_exactly(conn, received, size, deadline)


def _read_exactly(conn: socket.socket, received: bytearray, n: int, deadline: float) -> bytes:
    out = bytearray()
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("slow to send its request")
        conn.settimeout(left)
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionResetError("the peer closed the connection")
        out += chunk
        received += chunk
    return bytes(out)


class UnixServer:
    """Serves `WorkerService` on a unix socket: one task per connection, ended on `aclose`.

    Args:
        service: What the connections call.
        path: The socket to create (its directory's mode decides who may connect).
    """

    def __init__(self, service: WorkerService, path: str) -> None:
        self._service = service
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._connections = TaskOwner(f"unix socket {path}", _log)
        self._streams: set[MessageStream] = set()
        self._listener: socket.socket | None = None  # a copy of the listening socket, for the watch thread
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Listen on the socket.

        Raises:
            OSError: it cannot be created.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._accept, self.path)
        if self._service.inline:  # the watch thread answers State here while a routine overruns
            self._listener = socket.socket(fileno=os.dup(self._server.sockets[0].fileno()))
            self._listener.setblocking(False)
            self._loop = loop
            self._service.watch_also(self._answer_waiting)

    def _answer_waiting(self) -> None:
        """Answer the State calls waiting to be accepted; hand other connections to the loop (watch thread).

        Runs while a routine holds the main loop (see `_overrun`): a State
        call is a hello and a request, both sent at once, so it is read with
        a short timeout and answered here; a Dispatch or Stop connection is
        handed to the loop with what was read of it, and served once the
        routine lets go.
        """
        listener, loop = self._listener, self._loop
        if listener is None or loop is None:
            return  # not an inline worker's (never registered then)
        for _ in range(ACCEPTS_PER_PASS):
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # none waiting (or the socket is closing)
            try:
                self._answer_or_hand_over(conn, loop)
            except (OSError, ProtocolError) as exc:  # a broken or silent peer: its connection ends
                _log.debug("closing a unix-socket connection accepted during an overrun: %s", exc)
                conn.close()

    def _answer_or_hand_over(self, conn: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        deadline = time.monotonic() + WATCH_READ_S
        received = bytearray()
        try:
            state = method_of(_read_message(conn, received, HELLO_MAX_BYTES, deadline)) == "State"
            if state:
                _read_message(conn, received, STATE_REQUEST_MAX_BYTES, deadline)
        except TimeoutError:
            state = False  # slow to say what it wants: the loop waits for it as for any new connection
        if not state:
            loop.call_soon_threadsafe(self._adopt, conn, bytes(received))
            return
        reply = self._service.state().SerializeToString()
        conn.settimeout(WATCH_READ_S)
        conn.sendall(framed(reply))  # a few hundred bytes into an empty socket
        conn.close()

    def _adopt(self, conn: socket.socket, received: bytes) -> None:
        """Serve a connection the watch thread accepted, from the bytes it read on (on the loop)."""
        stream = MessageStream(first_limit=HELLO_MAX_BYTES, received=received)
        self._streams.add(stream)

        async def serve() -> None:
            try:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: stream, conn)
            except OSError:
                self._streams.discard(stream)
                conn.close()
                return
            await self._serve(stream)

        try:
            self._connections.spawn(serve(), name="unix connection")
        except RuntimeError:  # closed meanwhile (the worker is exiting)
            self._streams.discard(stream)
            conn.close()

    def _accept(self) -> MessageStream:
        stream = MessageStream(first_limit=HELLO_MAX_BYTES)
        self._streams.add(stream)
        self._connections.spawn(self._serve(stream), name="unix connection")
        return stream

    async def _serve(self, stream: MessageStream) -> None:
        try:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    method = method_of(await stream.receive())
            except (ConnectionError, ProtocolError, TimeoutError):
                method = None
            if method is None:
                return  # not one of ours (or gone): close it
            if method == "Buffers":
                self._side(stream)
                return
            if method == "Dispatch":
                pid = _peer(stream)
                await self._service.serve_stream(
                    stream.read_frames,
                    stream.write_frames,
                    "a dispatcher on the unix socket",
                    attach=stream.attach,
                    write_now=stream.write_frames_now,
                    busy_at=stream.busy_at,
                    side=lambda: _side.channel(pid),
                    through=(stream.through.pull, stream.through.write_through),
                    thread_write=stream.through.send,
                )
                return
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                request = await stream.receive()
            if request is None:
                return
            if method == "State":
                reply = self._service.state()
            else:
                reply = self._service.stop(pb.StopRequest.FromString(request))
            await stream.send(reply.SerializeToString())
        # a broken or silent peer (TimeoutError included): its connection ends, the worker goes on
        except Exception as exc:  # noqa: BLE001 - one peer's fault closes only its own connection
            _log.warning("closing a unix-socket connection: %s", exc)
        finally:
            self._streams.discard(stream)
            stream.close()

    def _side(self, stream: MessageStream) -> None:
        """Take over a ``Buffers`` connection: descriptors of large buffers from (and to) that dispatcher.

        The connection leaves the loop (its descriptors must be read with
        recvmsg, which the loop's reads would drop): a duplicate of its socket
        becomes the dispatcher's side connection, keyed by its pid, which is
        how its Dispatch streams find it; then it is answered ``ok``.
        """
        transport = stream.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if transport is None or sock is None:
            return
        transport.pause_reading()
        dup = socket.socket(fileno=os.dup(sock.fileno()))
        _side.register(_side.peer_pid(dup.fileno()), _side.SideChannel(dup))
        transport.write(framed(b"ok"))

    async def aclose(self) -> None:
        """Stop listening, end every connection, and remove the socket."""
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            self._listener.close()
        await self._connections.aclose()
        for stream in list(self._streams):
            stream.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        return f"<UnixServer {self.path} connections={len(self._streams)}>"
