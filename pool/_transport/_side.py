"""The side connection of `_buffers`: descriptors of large buffers to and from one peer process, and the inbox.

A second connection to a worker's unix socket (method ``Buffers``) that
leaves the event loop, because descriptors (SCM_RIGHTS) must be read with
``recvmsg``, which the loop's reads would drop. Records are 16 bytes
(token, size): with one descriptor, a region lent; with none and size 0,
a region released. Descriptors received wait in the inbox until the frame
naming them is loaded (`take`).
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import struct
import threading
from typing import Final, Protocol

INBOX_MAX: Final[int] = 256
"""Descriptors received and not yet taken that are kept at most (the oldest are let go past it)."""

SEND_TIMEOUT_S: Final[float] = 5.0
"""How long lending a descriptor may wait for room on the side connection."""

_RECORD: Final[struct.Struct] = struct.Struct("<QQ")  # token, size (0: a release)


class Lendable(Protocol):
    """What `SideChannel.lend` needs of a region (`_buffers.Region`)."""

    fd: int
    size: int
    token: int

    def take(self) -> None:
        """One more holder: the peer it is lent to."""
        ...

    def give_back(self) -> None:
        """The peer let go of it (from any thread)."""
        ...


class Holder(Protocol):
    """Where a received region came from, told when it is let go (a `SideChannel`, or `_chunks`' own arena)."""

    def release(self, token: int) -> None: ...


class SideChannel:
    """A connection to one peer process over which region descriptors cross (`socket.send_fds`).

    Records are 16 bytes (token, size) with one descriptor each (size 0 and
    none: a release); reads take one record at a time.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        sock.setblocking(False)
        self.closed = False
        self._lock = threading.RLock()  # a worker's watch thread, or a finalizer, may send too
        self._lent: dict[int, list[Lendable]] = {}  # regions lent over it and not yet released, once per lending

    def lend(self, region: Lendable) -> bool:
        """Send ``region``'s descriptor; False if the connection is gone (then send the value inline)."""
        region.take()
        if self._send(_RECORD.pack(region.token, region.size), region.fd):
            with self._lock:
                self._lent.setdefault(region.token, []).append(region)
            return True
        region.give_back()
        return False

    def release(self, token: int) -> None:
        """Tell the peer its region ``token`` is no longer mapped here."""
        self._send(_RECORD.pack(token, 0), -1)

    def _send(self, record: bytes, fd: int) -> bool:
        with self._lock:
            if self.closed:
                return False
            try:
                self.sock.settimeout(SEND_TIMEOUT_S)
                try:
                    socket.send_fds(self.sock, [record], [fd] if fd >= 0 else [])
                finally:
                    self.sock.setblocking(False)
            except OSError:
                self._shut()
                return False
        return True

    def drain(self) -> None:
        """Move every descriptor that arrived into the inbox, and count the releases that came back."""
        with self._lock:
            self._drain()

    def _drain(self) -> None:
        while not self.closed:
            try:
                data, fds, _, _ = socket.recv_fds(self.sock, _RECORD.size, 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.close()
                return
            if not data:
                for fd in fds:
                    os.close(fd)
                self.close()
                return
            token, length = _RECORD.unpack(data) if len(data) == _RECORD.size else (None, 0)
            if token is not None and not fds and length == 0 and (lent := self._lent.get(token)):
                region = lent.pop()  # the peer let go of a region this end lent it
                if not lent:
                    del self._lent[token]
                region.give_back()
            for fd in fds:
                if token is None:
                    os.close(fd)
                else:
                    keep(token, fd, self)

    def close(self) -> None:
        """Close the connection: what it lent counts as released (the peer is gone, or being replaced)."""
        with self._lock:
            self._shut()

    def _shut(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()
        for key, channel in list(_channels.items()):
            if channel is self:
                del _channels[key]
        lent, self._lent = self._lent, {}
        for regions in lent.values():
            for region in regions:
                region.give_back()


_inbox: collections.OrderedDict[int, tuple[int, Holder]] = collections.OrderedDict()  # token -> (fd, from)
_channels: dict[object, SideChannel] = {}  # by peer (a worker's pid as its dispatcher sees it, or a dispatcher's)


def expect() -> None:
    """This process has a peer that takes large buffers out of band (a unix socket's side connection, or a gRPC
    stream's chunks): they go out of band from now on (see `wanted`)."""
    global _expected
    _expected = True


def wanted() -> bool:
    """Whether payloads made now may go out of band: a process with no stream up yet (one that only writes to a
    store) would only put every buffer back in band, one copy more, so it makes none."""
    return _expected or bool(_channels)


_expected = False


def register(key: object, channel: SideChannel) -> None:
    """Make ``channel`` the side connection to peer ``key`` (replacing any earlier one)."""
    old = _channels.get(key)
    _channels[key] = channel
    if old is not None and old is not channel:
        old.close()


def channel(key: object) -> SideChannel | None:
    """The live side connection to peer ``key``, if any."""
    found = _channels.get(key)
    return None if found is None or found.closed else found


def peer_pid(fileno: int) -> int:
    """The process id at the other end of unix socket ``fileno`` (SO_PEERCRED)."""
    with socket.socket(fileno=os.dup(fileno)) as sock:
        return struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[0]


def keep(token: int, fd: int, side: Holder) -> None:
    """Put the descriptor of region ``token`` (from ``side``) in the inbox, for the frame that names it."""
    old = _inbox.pop(token, None)
    if old is not None:
        _let_go(*old, token)
    _inbox[token] = (fd, side)
    while len(_inbox) > INBOX_MAX:
        stale, (stale_fd, stale_side) = _inbox.popitem(last=False)
        _let_go(stale_fd, stale_side, stale)


def _let_go(fd: int, side: Holder, token: int) -> None:
    os.close(fd)
    side.release(token)


def drain_all() -> None:
    """Read every side connection's records now (descriptors into the inbox, releases counted)."""
    for side in list(_channels.values()):
        side.drain()


def take(token: int) -> tuple[int, Holder]:
    """The descriptor that arrived for ``token`` and where from (the caller closes it, and releases the token there).

    Raises:
        LookupError: it did not arrive.
    """
    got = _inbox.pop(token, None)
    if got is None:
        drain_all()
        got = _inbox.pop(token, None)
    if got is None:
        raise LookupError("its buffers did not arrive (the stream has no side connection)")
    return got
