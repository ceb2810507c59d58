"""The worker service on a unix socket, without HTTP/2: what a pool's own workers serve (see `pool._transport._framing`).

Every connection passes the gate first (`_gate`: a trusted uid, then the
handshake); the socket itself is made 0600 whatever the umask, so a
standalone ``--unix-socket`` in a shared directory is no open door either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import time
import uuid
from typing import Final

from .._base import TaskOwner
from .._transport import Framer, MessageStream, ProtocolError, Refused, Trust, check_unix, framed, side
from .._transport import leakypool_pb2 as pb
from ._gate import Doorman, Gate
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REQUEST_TIMEOUT_S: Final[float] = 10.0
"""How long a connection that proved itself may take to send its State/Stop request before it is closed."""

WATCH_READ_S: Final[float] = 0.25
"""How long the watch thread waits, in all, for a connection's hello, proof and State request. The
handshake proves both ends (issue 43): the dialler's proof comes only after its own loop has read the
worker's challenge, which a loaded machine can delay by tens of milliseconds (at 50 ms, one CI run's
State call went to the held loop and was not answered). A dialler slower than this is left to the loop."""

ACCEPTS_PER_PASS: Final[int] = 4
"""Connections the watch thread takes in one pass at most."""

STATE_REQUEST_MAX_BYTES: Final[int] = 1 << 10
"""Largest State or Stop request read (the one is empty, the other a float)."""

LISTEN_BACKLOG: Final[int] = 100
"""Connections waiting to be accepted at most (asyncio's default)."""


def _peer(stream: MessageStream) -> int:
    """The pid of the dispatcher on a stream (0 if unknown): its side connection's key."""
    sock = stream.transport.get_extra_info("socket") if stream.transport is not None else None
    try:
        return 0 if sock is None else side.peer_pid(sock.fileno())
    except OSError:
        return 0


def _recv(conn: socket.socket, deadline: float) -> bytes:
    """What waits on ``conn`` now (up to 4 KiB), waiting until ``deadline`` (monotonic) at most.

    Raises:
        TimeoutError: nothing came by the deadline.
        ConnectionResetError: the peer hung up.
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("slow to send its request")
    conn.settimeout(left)
    data = conn.recv(4096)
    if not data:
        raise ConnectionResetError("the peer closed the connection")
    return data


class UnixServer:
    """Serves `WorkerService` on a unix socket: one task per connection, ended on `aclose`.

    Args:
        service: What the connections call.
        path: The socket to create (mode 0600).
        trust: The keys a dialler must prove it holds, and the uids it may run as.
    """

    def __init__(self, service: WorkerService, path: str, trust: Trust) -> None:
        self._service = service
        self.path = path
        self._trust = trust
        self._uid = uuid.UUID(service.uid)
        self._server: asyncio.AbstractServer | None = None
        self._connections = TaskOwner(f"unix socket {path}", _log)
        self._streams: set[MessageStream] = set()
        self._doormen: set[Doorman] = set()
        self._listener: socket.socket | None = None  # a copy of the listening socket, for the watch thread
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Listen on the socket.

        Raises:
            OSError: it cannot be created.
        """
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(self._accept, sock=_listen(self.path))
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
        try:
            check_unix(conn, self._trust.uids, "the dialler")
        except Refused as exc:
            _log.warning("turned away a connection to the unix socket: %s", exc)
            conn.close()
            return
        deadline = time.monotonic() + WATCH_READ_S
        gate = Gate(self._trust.keyring, self._uid)
        request: bytes | None = None
        try:
            while not gate.open and gate.method in (None, "State"):
                for message in gate.feed(_recv(conn, deadline)):
                    conn.sendall(message)
            if gate.open and gate.method == "State":
                request = self._state_request(conn, gate, deadline)
        except TimeoutError:
            pass  # slow: the loop goes on with it where this left off
        except Refused as exc:
            if exc.reply:
                conn.sendall(framed(exc.reply))
            raise ProtocolError(str(exc)) from None
        if request is None:
            loop.call_soon_threadsafe(self._adopt, conn, gate)
            return
        reply = self._service.state().SerializeToString()
        conn.settimeout(WATCH_READ_S)
        conn.sendall(framed(reply))  # a few hundred bytes into an empty socket
        conn.close()

    @staticmethod
    def _state_request(conn: socket.socket, gate: Gate, deadline: float) -> bytes | None:
        """The State request after the proof, read by ``deadline``; None if it did not all come (kept in ``gate``)."""
        framer = Framer(STATE_REQUEST_MAX_BYTES)
        framer.hold(gate.rest())
        try:
            while (request := framer.next(STATE_REQUEST_MAX_BYTES)) is None:
                framer.hold(_recv(conn, deadline))
        except TimeoutError:
            gate.unread(framer.rest())
            return None
        return request

    def _adopt(self, conn: socket.socket, gate: Gate) -> None:
        """Serve a connection the watch thread accepted, from where its gate is (on the loop)."""
        doorman = self._doorman(gate)

        async def serve() -> None:
            try:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: doorman, conn)
            except OSError:
                self._doormen.discard(doorman)
                conn.close()

        try:
            self._connections.spawn(serve(), name="unix connection")
        except RuntimeError:  # closed meanwhile (the worker is exiting)
            self._doormen.discard(doorman)
            conn.close()

    def _doorman(self, gate: Gate | None = None) -> Doorman:
        doorman = Doorman(
            gate or Gate(self._trust.keyring, self._uid), self._trust.uids, self._admit, self._doormen.discard
        )
        self._doormen.add(doorman)
        return doorman

    def _accept(self) -> Doorman:
        return self._doorman()

    def _admit(self, method: str, stream: MessageStream) -> None:
        """A dialler proved itself: serve ``method`` on ``stream``."""
        if method != "Dispatch":
            stream.limit = STATE_REQUEST_MAX_BYTES
        self._streams.add(stream)
        try:
            self._connections.spawn(self._serve(stream, method), name="unix connection")
        except RuntimeError:  # closed meanwhile (the worker is exiting)
            self._streams.discard(stream)
            stream.close()

    async def _serve(self, stream: MessageStream, method: str) -> None:
        try:
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
                    side=lambda: side.channel(pid),
                    through=(stream.through.pull, stream.through.write_through),
                    thread_write=stream.through.send,
                    on_wire=stream.through.on_wire,
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
        side.register(side.peer_pid(dup.fileno()), side.SideChannel(dup))
        transport.write(framed(b"ok"))

    async def aclose(self) -> None:
        """Stop listening, end every connection, and remove the socket."""
        if self._server is not None:
            self._server.close()
        if self._listener is not None:
            self._listener.close()
        for doorman in list(self._doormen):
            doorman.close()
        await self._connections.aclose()
        for stream in list(self._streams):
            stream.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        return f"<UnixServer {self.path} connections={len(self._streams)}>"


def _listen(path: str) -> socket.socket:
    """A listening socket at ``path``, mode 0600 whatever the umask (no one can connect before it listens).

    A stale socket left there (a worker killed before it removed it) is
    replaced, as asyncio's own ``create_unix_server`` does; anything else
    at the path is left alone (binding fails).

    Raises:
        OSError: it cannot be made.
    """
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(LISTEN_BACKLOG)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock
