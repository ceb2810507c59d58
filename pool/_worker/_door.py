"""The worker's TCP port: who may connect, how many at once, and how long before proving itself (issue 51).

gRPC accepts every connection it is offered and closes a silent one only after its handshake timeout
(~120 s), with no cap per peer: another local user once opened 19,990 silent connections in 8.8 s, the
worker ran out of descriptors and the user's own call failed. So the port is the Door's, and gRPC
listens behind it on a unix socket in a private directory::

    caller ──TCP──> Door (--host/--port)
                     │ on loopback: the caller's uid, by the connection's four-tuple (`check_tcp_peer`);
                     │   a uid this worker does not trust is closed at once: it could never pass anyway
                     │ `Gatekeeper.admit` (I/O-free): caps per peer (a uid on loopback, an address off it)
                     │   and in all, on connections and on those not yet proven; room kept for trusted uids
                     └──bytes, both ways──> gRPC, on a unix socket (each relayed connection dials from a
                                            name of its own, so gRPC's peer names it: `Door.peer`)
    the handshake of a stream on it passed ──> `Door.proven`: it keeps no deadline
    not proven within `handshake_timeout` ──> closed (seconds, not gRPC's 120)

Everything a caller costs before it proved itself is bounded: a connection's
buffers (reading pauses while the other side's are full), the number of
such connections per peer and in all, and the time each may take.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import resource
import socket
import tempfile
import time
from collections.abc import Collection
from typing import Final, cast

from .._base import TaskOwner
from .._transport import loopback_host, tcp_owner

_log = logging.getLogger("leakypool.worker")

HANDSHAKE_TIMEOUT_S: Final[float] = 5.0
"""How long a connection may take to prove itself (its first stream's handshake) before it is closed."""

FD_HEADROOM: Final[int] = 64
"""Descriptors kept out of the connections' reach: the worker's own files, pipes and the store."""

REFUSAL_LOG_S: Final[float] = 60.0
"""A peer refused again within this long is not logged again (a flood is one line a minute, not thousands)."""

BACKLOG: Final[int] = 1024
"""Connections the kernel may hold for the door to accept."""

_HIGH_WATER: Final[int] = 1 << 20
"""Bytes waiting on one side before the other is no longer read (a caller cannot make the worker buffer more)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Caps:
    """How many connections the door lets in.

    Attributes:
        connections: In all (from the descriptor limit, less `FD_HEADROOM`).
        reserved: Of those, kept for callers of a trusted uid on loopback (the user's own pools).
        per_peer: Open at once from one untrusted peer (an address off loopback).
        unproven_per_peer: Not yet proven at once, from one untrusted peer.
        unproven: Not yet proven at once, from untrusted peers in all.
    """

    connections: int
    reserved: int = 64
    per_peer: int = 64
    unproven_per_peer: int = 16
    unproven: int = 256

    @classmethod
    def from_limit(cls) -> Caps:
        """Caps under this process's descriptor limit (raised to its hard limit first, as servers do)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and soft < hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
        # Each relayed connection holds three descriptors: the caller's socket, the relay's and gRPC's end.
        connections = max(8, (min(soft, 1 << 20) - FD_HEADROOM) // 3)
        return cls(connections=connections, reserved=min(64, connections // 4))


@dataclasses.dataclass(frozen=True, slots=True)
class Peer:
    """Who is at the other end of a connection, as far as the door can tell before any handshake.

    Attributes:
        key: What caps count by: ``uid N`` on loopback, the address off it.
        trusted: A uid on loopback this worker trusts (its own, ``--peer-uids``).
    """

    key: str
    trusted: bool


class Gatekeeper:
    """The door's counts and decisions, I/O-free: whether a connection may come in, and what it holds."""

    def __init__(self, caps: Caps) -> None:
        self.caps = caps
        self.open: dict[str, int] = {}  # peer key -> connections open
        self.unproven: dict[str, int] = {}  # peer key -> connections not yet proven (untrusted peers only)
        self.total = 0
        self.total_unproven = 0

    def admit(self, peer: Peer) -> str | None:
        """Let a connection of ``peer`` in (counted; None), or why not (nothing counted)."""
        caps = self.caps
        if peer.trusted:
            if self.total >= caps.connections:
                return f"{caps.connections} connections are open"
        else:
            if self.total >= caps.connections - caps.reserved:
                return f"{caps.connections - caps.reserved} connections are open (the rest are kept for this user)"
            if self.open.get(peer.key, 0) >= caps.per_peer:
                return f"{caps.per_peer} connections of {peer.key} are open"
            if self.unproven.get(peer.key, 0) >= caps.unproven_per_peer:
                return f"{caps.unproven_per_peer} connections of {peer.key} have not proven themselves yet"
            if self.total_unproven >= caps.unproven:
                return f"{caps.unproven} connections have not proven themselves yet"
            self.unproven[peer.key] = self.unproven.get(peer.key, 0) + 1
            self.total_unproven += 1
        self.open[peer.key] = self.open.get(peer.key, 0) + 1
        self.total += 1
        return None

    def proven(self, peer: Peer) -> None:
        """A connection of ``peer`` proved itself (it is counted as unproven no more)."""
        if not peer.trusted:
            self._take(self.unproven, peer.key)
            self.total_unproven -= 1

    def closed(self, peer: Peer, proven: bool) -> None:
        """A connection of ``peer`` that `admit` let in is closed."""
        self._take(self.open, peer.key)
        self.total -= 1
        if not proven:
            self.proven(peer)

    @staticmethod
    def _take(counts: dict[str, int], key: str) -> None:
        left = counts[key] - 1
        if left:
            counts[key] = left
        else:
            del counts[key]

    def __repr__(self) -> str:
        return f"<Gatekeeper {self.total} open, {self.total_unproven} unproven of untrusted peers; {self.caps}>"


class _Side(asyncio.Protocol):
    """One side of a relayed connection: what it reads goes to the other side, with back-pressure both ways."""

    def __init__(self, relay: _Relay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.other: _Side | None = None
        self.early: list[bytes] = []  # read before the other side was connected: written once it is

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # (uvloop's are not asyncio.Transport subclasses)
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)
        other = self.other
        if other is not None and other.early:
            for data in other.early:
                self.transport.write(data)
            other.early.clear()
            if other.transport is not None:
                other.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        other = self.other
        if other is not None and other.transport is not None:
            if not other.transport.is_closing():
                other.transport.write(data)
            return
        self.early.append(data)  # (a loop may start reading before the protocol could pause it)
        if self.transport is not None:
            self.transport.pause_reading()  # one read at most waits here: no more until the other side is there

    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.other is not None and self.other.transport is not None and self.other.transport.can_write_eof():
            self.other.transport.write_eof()
            return True
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.close()


class _Relay:
    """One caller's connection, relayed to the gRPC server from a unix socket name of its own."""

    def __init__(self, door: Door, peer: Peer, name: str) -> None:
        self.door = door
        self.peer = peer
        self.name = name  # gRPC's peer for it: "unix:" + name
        self.outer = _Side(self)
        self.inner = _Side(self)
        self.outer.other, self.inner.other = self.inner, self.outer
        self.proven = False
        self.closed = False
        self.deadline: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.deadline is not None:
            self.deadline.cancel()
        for side in (self.outer, self.inner):
            if side.transport is not None:
                side.transport.close()
        self.door._relays.pop(self.name, None)
        self.door.gatekeeper.closed(self.peer, self.proven)

    def overdue(self) -> None:
        if not self.proven and not self.closed:
            self.door._refused(self.peer, f"it did not prove itself within {self.door.handshake_timeout:g}s")
            self.close()


class Door:
    """The worker's TCP port: accepts, judges and relays connections to the gRPC server behind it.

    Args:
        trusted: The uids a caller on loopback may run as.
        handshake_timeout: Seconds a connection may take to prove itself.
        caps: How many connections to let in (default: from the descriptor limit).
    """

    def __init__(
        self, trusted: Collection[int], *, handshake_timeout: float = HANDSHAKE_TIMEOUT_S, caps: Caps | None = None
    ) -> None:
        self.trusted = frozenset(trusted)
        self.handshake_timeout = handshake_timeout
        self.gatekeeper = Gatekeeper(caps or Caps.from_limit())
        self._directory = tempfile.mkdtemp(prefix="lp-door-")  # 0700: only this user may dial what is behind
        self.inner_path = os.path.join(self._directory, "grpc")
        self._names = itertools.count()
        self._relays: dict[str, _Relay] = {}
        self._server: asyncio.Server | None = None
        self._host = ""
        self._port = 0
        self._logged: dict[str, float] = {}
        self._tasks = TaskOwner("worker door", _log)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (the gRPC server must listen on `inner_path` by now); the port bound.

        Raises:
            OSError: the address cannot be bound.
        """
        self._host = host
        loop = asyncio.get_running_loop()
        bare = host.strip("[]")
        if bare == "::":  # both families on one socket, as gRPC binds it (asyncio would make it IPv6 only)
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("::", port))
                sock.listen(BACKLOG)
            except OSError:
                sock.close()
                raise
            self._server = await loop.create_server(self._accepted, sock=sock)
        else:
            self._server = await loop.create_server(
                self._accepted, bare or None, port, reuse_address=True, backlog=BACKLOG
            )
        self._port = self._server.sockets[0].getsockname()[1]
        return self._port

    def peer(self, grpc_peer: str) -> _Relay | None:
        """The relayed connection gRPC names ``grpc_peer`` (``unix:<its name>``), if it is still open."""
        return self._relays.get(grpc_peer.removeprefix("unix:"))

    def proven(self, grpc_peer: str) -> None:
        """A stream on that connection passed the handshake: the connection keeps no deadline from now."""
        relay = self.peer(grpc_peer)
        if relay is not None and not relay.proven:
            relay.proven = True
            if relay.deadline is not None:
                relay.deadline.cancel()
            self.gatekeeper.proven(relay.peer)

    def describe(self, grpc_peer: str) -> str:
        """The caller behind ``grpc_peer``, for messages."""
        relay = self.peer(grpc_peer)
        return relay.peer.key if relay is not None else grpc_peer

    def _accepted(self) -> asyncio.Protocol:
        return _Accepting(self)

    def _judge(self, sock: socket.socket) -> tuple[Peer, str | None]:
        """Who is at the other end of an accepted connection (on loopback: its uid, by the four-tuple), and why
        it may not come in whatever the counts say (a uid this worker does not trust, or none the kernel knows)."""
        remote, local = sock.getpeername(), sock.getsockname()
        host = _plain(remote[0])
        if loopback_host(host) is None:
            return Peer(host, False), None
        uid = tcp_owner((host, remote[1]), (_plain(local[0]), local[1]), listening=False)
        if uid is None:
            return Peer(f"{host}:{remote[1]}", False), "the kernel knows no such connection"
        if uid not in self.trusted:
            return Peer(f"uid {uid}", False), f"uid {uid} is not one this worker trusts (--peer-uids)"
        return Peer(f"uid {uid}", True), None

    def _refused(self, peer: Peer, why: str) -> None:
        key = peer.key
        now = time.monotonic()
        if now - self._logged.get(key, -REFUSAL_LOG_S) >= REFUSAL_LOG_S:
            self._logged[key] = now
            if len(self._logged) > 4096:  # (a flood from many addresses: forget the oldest)
                self._logged = dict(list(self._logged.items())[-1024:])
            _log.warning("closed a connection of %s: %s (not logged again for %gs)", key, why, REFUSAL_LOG_S)

    def _open(self, transport: asyncio.Transport) -> None:
        """An accepted connection: judged, counted, then relayed (or closed at once)."""
        try:
            peer, why = self._judge(transport.get_extra_info("socket"))
        except OSError:  # (gone already)
            transport.abort()
            return
        why = why or self.gatekeeper.admit(peer)
        if why is not None:
            self._refused(peer, why)
            transport.abort()
            return
        name = os.path.join(self._directory, f"c{next(self._names)}")
        relay = _Relay(self, peer, name)
        self._relays[name] = relay
        relay.outer.connection_made(transport)
        transport.set_protocol(relay.outer)
        relay.deadline = asyncio.get_running_loop().call_later(self.handshake_timeout, relay.overdue)
        self._tasks.spawn(self._dial(relay), name="relay a connection")

    async def _dial(self, relay: _Relay) -> None:
        """Connect the inner side (from the relay's own name) and start relaying."""
        loop = asyncio.get_running_loop()
        inner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            inner.bind(relay.name)
            inner.setblocking(False)
            await loop.sock_connect(inner, self.inner_path)
            os.unlink(relay.name)  # the socket keeps its name (gRPC's peer); the directory stays clean
            if relay.closed:
                inner.close()
                return
            await loop.create_unix_connection(lambda: relay.inner, sock=inner)  # (writes what came early)
        except OSError as exc:
            inner.close()
            with contextlib.suppress(OSError):
                os.unlink(relay.name)
            _log.error("could not relay a connection of %s to the gRPC server: %s", relay.peer.key, exc)
            relay.close()

    async def close(self) -> None:
        """Stop listening and close every connection; remove the private directory."""
        if self._server is not None:
            self._server.close()
        await self._tasks.aclose()
        for relay in list(self._relays.values()):
            relay.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        with contextlib.suppress(OSError):
            os.unlink(self.inner_path)
        with contextlib.suppress(OSError):
            os.rmdir(self._directory)

    def __repr__(self) -> str:
        return f"<Door {self._host}:{self._port} {self.gatekeeper!r}>"


def _plain(host: str) -> str:
    """An address as the kernel's tables name it: an IPv4-mapped IPv6 address (a dual-stack socket) as IPv4."""
    return host[len("::ffff:") :] if host.startswith("::ffff:") and "." in host else host


class _Accepting(asyncio.Protocol):
    """A connection just accepted: handed to the door, which gives it a relay's protocol or closes it."""

    def __init__(self, door: Door) -> None:
        self._door = door

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._door._open(cast("asyncio.Transport", transport))
