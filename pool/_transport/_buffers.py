"""Large buffers beside the stream: memfd regions whose descriptors cross a side connection (issue 34).

A pool and its own workers share a host, so a large argument or result
need not be pushed through the socket's byte stream (and copied by
protobuf, the kernel and the reader on the way). `_wire` pickles with
protocol 5 and hands the large buffers (numpy arrays, and `bytes`,
`bytearray`, `memoryview` it wraps) to `pack`, which copies them once
into a fresh memfd region; the pickle travels in the frame as usual:

    sender                                           receiver
    _wire.dumps -> pack: buffers -> Region (memfd)
    Session.carry: the region's descriptor ── side connection (SCM_RIGHTS) ──> inbox[token]
                   the payload (header + pickle) ── Dispatch stream ─────────> _wire.loads -> unpack:
                                                                                mmap(MAP_PRIVATE), the buffers
                                                                                over it, no copy

The receiver maps the region privately: arrays arrive writable, and a
write copies that page for the receiver alone (value semantics: the
sender's memory never changes). A private mapping still sees later writes
to pages it has not copied, so a region is written again only once every
receiver reported its mapping gone (a release record back over the side
connection, sent when the mapping is unmapped) and the payload naming it
was dropped; until then the next payload gets another region. Idle
regions are kept for reuse (`ARENA_KEEP_BYTES`): their pages stay
allocated and mapped, so a large call copies at memory speed instead of
faulting fresh pages in. A memfd has no name in /dev/shm to leak and no
/dev/shm size limit, and is freed once its last descriptor and mapping go. The side connection (`SideChannel`) is
a second connection to the worker's unix socket (method ``Buffers``); the
descriptor is sent before the frame that names it, so it is waiting when
the frame is read. A stream without one (gRPC) gets the value inlined
(`_wire.inline`).
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import secrets
import socket
import struct
import threading
import weakref
from typing import Final

MARK: Final[int] = 0
"""First byte of a payload whose buffers are out of band (a pickle starts with 0x80)."""

OOB_MIN_BYTES: Final[int] = 512 << 10
"""Buffers at least this large leave the pickle stream (smaller ones stay in it: today's path)."""

COPY_CHUNK_BYTES: Final[int] = 8 << 20
"""A region is written this much at a time, so another thread (a worker's watch) is not held off for long."""

ARENA_KEEP_BYTES: Final[int] = 1536 << 20
"""Idle regions a process keeps for reuse, in all (the most recently used first): a payload up to about
this size reuses pages already allocated and mapped instead of faulting fresh ones in."""

INBOX_MAX: Final[int] = 256
"""Descriptors received and not yet taken that are kept at most (the oldest are closed past it)."""

SEND_TIMEOUT_S: Final[float] = 5.0
"""How long lending a descriptor may wait for room on the side connection."""

_HEADER: Final[struct.Struct] = struct.Struct("<BQQI")  # mark, token, region size, buffer count
_SPAN: Final[struct.Struct] = struct.Struct("<QQ")  # offset, length of one buffer
_RECORD: Final[struct.Struct] = struct.Struct("<QQ")  # side connection: token, size (0: a release)


class Region:
    """A memfd this process writes payloads into, mapped here once (shared), reused once every receiver let go.

    Reuse makes a large call cost a copy at memory speed, not one into
    fresh pages (faulting a GiB in costs ~1 s here); see the module docstring.
    """

    __slots__ = ("fd", "lent", "mem", "owned", "size", "token")

    def __init__(self, size: int) -> None:
        self.size = size
        self.token = 0  # this use's name on the side connections; a new one per use
        self.lent = 0  # peers holding a mapping (or a descriptor) of this use
        self.owned = False  # a payload of this use is alive here
        self.fd = os.memfd_create("leakypool-buffers", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.mem = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, buffers: list[memoryview]) -> None:
        """Copy ``buffers`` in, page-aligned, a chunk at a time (other threads run between chunks)."""
        mem, at = self.mem, 0
        for buffer in buffers:
            flat = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
            for start in range(0, len(flat), COPY_CHUNK_BYTES):
                piece = flat[start : start + COPY_CHUNK_BYTES]
                mem[at + start : at + start + len(piece)] = piece
            at += _page(len(flat))

    def close(self) -> None:
        """Unmap and close (its memory goes once no receiver maps it)."""
        with contextlib.suppress(BufferError, ValueError, OSError):
            self.mem.close()
            os.close(self.fd)


class Payload(bytes):
    """A pickle whose large buffers live in ``region``; dropping it lets the region be reused."""

    region: Region

    def __del__(self) -> None:
        region = getattr(self, "region", None)
        if region is not None:
            region.owned = False
            with contextlib.suppress(Exception):  # at interpreter exit the module may be half gone
                _settle(region)


_free: list[Region] = []  # regions no one maps: reused, most recent first
_lent: dict[int, Region] = {}  # token -> a region in use (a payload alive here, or a peer's mapping)
_arena_lock = threading.Lock()


def _acquire(need: int) -> Region:
    """A region of at least ``need`` bytes: an idle one that fits (not four times too big), else a new one."""
    for side in list(_channels.values()):
        side.drain()  # releases that came in
    with _arena_lock:
        best = None
        for region in _free:
            if need <= region.size <= 4 * need and (best is None or region.size < best.size):
                best = region
        if best is not None:
            _free.remove(best)
    region = best if best is not None else Region(need)
    region.token = secrets.randbits(64)
    region.owned, region.lent = True, 0
    _lent[region.token] = region
    return region


def _settle(region: Region) -> None:
    """Back to the idle list once nothing here or on a peer uses it (or closed, past `ARENA_KEEP_BYTES`)."""
    if region.owned or region.lent > 0 or _lent.get(region.token) is not region:
        return
    del _lent[region.token]
    with _arena_lock:
        _free.insert(0, region)
        kept = 0
        for index, idle in enumerate(_free):
            kept += idle.size
            if kept > ARENA_KEEP_BYTES:
                for extra in _free[index:]:
                    extra.close()
                del _free[index:]
                break


def _released(token: int) -> None:
    region = _lent.get(token)
    if region is not None:
        region.lent -= 1
        _settle(region)


def pack(pickled: bytes, buffers: list[memoryview]) -> Payload:
    """``pickled`` and its out-of-band ``buffers`` as one payload; the buffers are copied once, into a region."""
    spans, at = [], 0
    for buffer in buffers:
        spans.append(_SPAN.pack(at, buffer.nbytes))
        at += _page(buffer.nbytes)
    region = _acquire(_size_class(at))
    try:
        region.write(buffers)
    except BaseException:
        region.owned = False
        _settle(region)
        raise
    payload = Payload(b"".join((_HEADER.pack(MARK, region.token, region.size, len(buffers)), *spans, pickled)))
    payload.region = region
    return payload


def size(data: bytes) -> int:
    """Bytes ``data`` stands for: its region's size too, for a payload."""
    return len(data) + _HEADER.unpack_from(data)[2] if is_payload(data) else len(data)


def region_of(data: bytes) -> Region | None:
    """The region of payload ``data`` if it is this process's own (made here), else None (received)."""
    region = getattr(data, "region", None)
    return region if region is not None else _lent.get(_HEADER.unpack_from(data)[1])


def is_payload(data: bytes) -> bool:
    """Whether ``data`` carries its buffers out of band (cheap: one byte)."""
    return bool(data) and data[0] == MARK


def unpack(data: bytes) -> tuple[memoryview, list[memoryview]]:
    """The pickle of payload ``data`` and its buffers, mapped privately (writable, copy-on-write).

    Raises:
        LookupError: the region's descriptor did not arrive (the stream has no side connection).
    """
    _, token, length, count = _HEADER.unpack_from(data)
    region = region_of(data)
    if region is not None:  # our own (a value put back in band): lent to ourselves
        fd, side = os.dup(region.fd), None
        region.lent += 1
    else:
        fd, side = take(token)
    try:
        mapped = mmap.mmap(fd, length, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except BaseException:
        _release(side, token)
        raise
    finally:
        os.close(fd)
    weakref.finalize(mapped, _release, side, token).atexit = False  # unmapped: the sender may write there again
    whole, at = memoryview(mapped), _HEADER.size + count * _SPAN.size
    spans = (_SPAN.unpack_from(data, _HEADER.size + i * _SPAN.size) for i in range(count))
    return memoryview(data)[at:], [whole[offset : offset + n] for offset, n in spans]


def _release(side: SideChannel | None, token: int) -> None:
    _released(token) if side is None else side.release(token)


def _size_class(n: int) -> int:
    """Region sizes are powers of two from 1 MiB, so a region serves payloads of nearby sizes."""
    return max(1 << 20, 1 << (n - 1).bit_length())


def _page(n: int) -> int:
    return (n + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


# -- the side connection and what arrived on it ---------------------------------------------


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
        self._tokens: dict[int, int] = {}  # regions lent over it and not yet released: token -> count

    def lend(self, region: Region) -> bool:
        """Send ``region``'s descriptor; False if the connection is gone (then send the value inline)."""
        region.lent += 1
        if self._send(_RECORD.pack(region.token, region.size), region.fd):
            self._tokens[region.token] = self._tokens.get(region.token, 0) + 1
            return True
        region.lent -= 1
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
            if token is not None and not fds and length == 0 and self._tokens.get(token):
                self._tokens[token] -= 1  # the peer let go of a region this end lent it
                if not self._tokens[token]:
                    del self._tokens[token]
                _released(token)
            for fd in fds:
                if token is None:
                    os.close(fd)
                else:
                    _keep(token, fd, self)

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
        tokens, self._tokens = self._tokens, {}
        for token, count in tokens.items():
            for _ in range(count):
                _released(token)


_inbox: collections.OrderedDict[int, tuple[int, SideChannel]] = collections.OrderedDict()  # token -> (fd, from)
_channels: dict[object, SideChannel] = {}  # by peer (a worker's pid as its dispatcher sees it, or a dispatcher's)


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


def _keep(token: int, fd: int, side: SideChannel) -> None:
    old = _inbox.pop(token, None)
    if old is not None:
        _let_go(*old, token)
    _inbox[token] = (fd, side)
    while len(_inbox) > INBOX_MAX:
        stale, (stale_fd, stale_side) = _inbox.popitem(last=False)
        _let_go(stale_fd, stale_side, stale)


def _let_go(fd: int, side: SideChannel, token: int) -> None:
    os.close(fd)
    side.release(token)


def take(token: int) -> tuple[int, SideChannel]:
    """The descriptor that arrived for ``token`` and where from (the caller closes it, and releases the token there).

    Raises:
        LookupError: it did not arrive.
    """
    got = _inbox.pop(token, None)
    if got is None:
        for side in list(_channels.values()):
            side.drain()
        got = _inbox.pop(token, None)
    if got is None:
        raise LookupError("its buffers did not arrive (the stream has no side connection)")
    return got


def forget(data: bytes) -> None:
    """Let go of the descriptor that came for payload ``data``, which will not be loaded (its call was turned away)."""
    if not is_payload(data) or region_of(data) is not None:
        return
    with contextlib.suppress(LookupError):
        _let_go(*take(token := _HEADER.unpack_from(data)[1]), token)
