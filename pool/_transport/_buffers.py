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
the frame is read. A stream without one (gRPC) carries the region's bytes
in chunks ahead of the frame (`_chunks`) into a region of the receiver's
arena. A payload passed on (the pool relaying a nested call) is copied
into a region of the relaying process (`adopt`), never unpickled there.
"""

from __future__ import annotations

import collections
import contextlib
import mmap
import os
import secrets
import struct
import threading
import weakref
from collections.abc import Iterator
from typing import Final

from . import _side
from ._side import _let_go, take

MARK: Final[int] = 0
"""First byte of a payload whose buffers are out of band (a pickle starts with 0x80)."""

OOB_MIN_BYTES: Final[int] = 512 << 10
"""Buffers at least this large leave the pickle stream (smaller ones stay in it: today's path)."""

COPY_CHUNK_BYTES: Final[int] = 8 << 20
"""A region is written this much at a time, so another thread (a worker's watch) is not held off for long."""

ARENA_KEEP_BYTES: Final[int] = 1536 << 20
"""Idle regions a process keeps for reuse, in all (the most recently used first): a payload up to about
this size reuses pages already allocated and mapped instead of faulting fresh ones in."""

_HEADER: Final[struct.Struct] = struct.Struct("<BQQI")  # mark, token, region size, buffer count
_SPAN: Final[struct.Struct] = struct.Struct("<QQ")  # offset, length of one buffer


class Region:
    """A memfd this process writes payloads into, mapped here once (shared), reused once every receiver let go.

    Reuse makes a large call cost a copy at memory speed, not one into
    fresh pages (faulting a GiB in costs ~1 s here); see the module docstring.
    """

    __slots__ = ("fd", "lent", "mem", "size", "token")

    def __init__(self, size: int) -> None:
        self.size = size
        self.token = 0  # this use's name on the side connections; a new one per use
        self.lent = 0  # holders of this use: its payload here, peers' mappings and descriptors, spills
        self.fd = os.memfd_create("leakypool-buffers", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, size)
            self.mem = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise
        with contextlib.suppress(OSError, AttributeError):  # 2 MiB pages where the system allows them for shared
            self.mem.madvise(mmap.MADV_HUGEPAGE)  # memory (shmem_enabled "advise"); unmeasured: ours says "never"

    def write(self, buffers: list[memoryview]) -> None:
        """Copy ``buffers`` in, page-aligned, a chunk at a time (other threads run between chunks)."""
        mem, at = self.mem, 0
        for buffer in buffers:
            flat = buffer.cast("B") if buffer.format != "B" or buffer.ndim != 1 else buffer
            for start in range(0, len(flat), COPY_CHUNK_BYTES):
                piece = flat[start : start + COPY_CHUNK_BYTES]
                mem[at + start : at + start + len(piece)] = piece
            at += _page(len(flat))

    def take(self) -> None:
        """One more holder of this use (a peer it is lent to, a spill, a mapping here)."""
        with _arena():
            self.lent += 1

    def give_back(self) -> None:
        """One holder let go of it: from any thread, a finalizer too (never blocks, see `_arena`)."""
        _returns.append(self)
        if _arena_lock.acquire(blocking=False):
            try:
                _settle_returns()
            finally:
                _arena_lock.release()

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
            with contextlib.suppress(Exception):  # at interpreter exit the module may be half gone
                region.give_back()


_free: list[Region] = []  # regions no one maps: reused, most recent first
_lent: dict[int, Region] = {}  # token -> a region in use (a payload alive here, or a peer's mapping)
_returns: collections.deque[Region] = collections.deque()  # holders let go of these, not yet counted out
_arena_lock = threading.Lock()
"""Guards the counts, `_lent` and `_free`: the loop, a worker's plain and watch threads and finalizers reach
them. A finalizer may run on a thread that holds it (garbage collected mid-update), so letting go never
waits for it: it queues the region (`Region.give_back`), counted out by whoever holds the lock next."""


@contextlib.contextmanager
def _arena() -> Iterator[None]:
    """Hold `_arena_lock`; count out what was let go meanwhile before letting go of it."""
    with _arena_lock:
        yield
        _settle_returns()


def _settle_returns() -> None:  # with `_arena_lock` held
    while _returns:
        region = _returns.popleft()
        region.lent -= 1
        _settle(region)


def _acquire(need: int) -> Region:
    """A region of at least ``need`` bytes (one holder: its payload): an idle one that fits, else a new one."""
    _side.drain_all()  # releases that came in
    with _arena():
        best = None
        for region in _free:
            if need <= region.size <= 4 * need and (best is None or region.size < best.size):
                best = region  # (not four times too big)
        if best is not None:
            _free.remove(best)
    region = best if best is not None else Region(need)
    with _arena():
        region.token = secrets.randbits(64)
        region.lent = 1
        _lent[region.token] = region
    return region


def _settle(region: Region) -> None:  # with `_arena_lock` held
    """Back to the idle list once nothing here or on a peer uses it (or closed, past `ARENA_KEEP_BYTES`)."""
    if region.lent > 0 or _lent.get(region.token) is not region:
        return
    del _lent[region.token]
    _free.insert(0, region)
    kept = 0
    for index, idle in enumerate(_free):
        kept += idle.size
        if kept > ARENA_KEEP_BYTES:
            for extra in _free[index:]:
                extra.close()
            del _free[index:]
            break


def release_idle() -> int:
    """Close every idle region (their memory goes back to the system); the bytes they held (a worker gone idle)."""
    _side.drain_all()  # the releases peers sent since: regions they let go of are idle too
    with _arena():
        regions, _free[:] = list(_free), []
    for region in regions:
        region.close()
    return sum(region.size for region in regions)


def idle_bytes() -> int:
    """Bytes of the idle regions kept for reuse (resident, but not what the process's own work holds)."""
    with _arena():
        return sum(region.size for region in _free)


def returned(token: int) -> None:
    """One holder of this process's region ``token`` let go of it (a peer's mapping, a spill, an assembly)."""
    region = _lent.get(token)
    if region is not None:
        region.give_back()


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
        region.give_back()
        raise
    payload = Payload(b"".join((_HEADER.pack(MARK, region.token, region.size, len(buffers)), *spans, pickled)))
    payload.region = region
    return payload


def receiving(size: int) -> Region:
    """A region of this arena for a value a peer sends in chunks (`_chunks`), held until `returned`."""
    return _acquire(_size_class(size))  # its one holder: the assembly, not a payload


def spans(data: bytes) -> list[tuple[int, int]]:
    """Where payload ``data``'s buffers lie in its region: (offset, length) each."""
    count = _HEADER.unpack_from(data)[3]
    return [_SPAN.unpack_from(data, _HEADER.size + i * _SPAN.size) for i in range(count)]


def pickle_start(data: bytes | memoryview) -> int:
    """Where payload ``data``'s pickle starts (after its header and its buffers' spans)."""
    return _HEADER.size + _HEADER.unpack_from(data)[3] * _SPAN.size


def adopt(data: bytes) -> bytes:
    """Payload ``data`` received here, made one of this process's own, to pass on (nested calls); else ``data``.

    The buffers are copied from the region that came with it into a region
    of this process (one copy, at memory speed), the pickle untouched: the
    value is never unpickled here (the pool relays what it may not be able
    to import), and the result can be lent again and again (a relayed call
    turned away and offered to another worker). The region that came is let
    go at once.

    Raises:
        LookupError: its region did not arrive (or was already taken).
    """
    if not is_payload(data) or region_of(data) is not None:
        return data
    _, token, length, count = _HEADER.unpack_from(data)
    fd, side = take(token)
    try:
        theirs = mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except BaseException:
        _let_go(fd, side, token)
        raise
    os.close(fd)
    region = _acquire(_size_class(length))
    try:
        with theirs, memoryview(theirs) as view:
            region.write([view[offset : offset + n] for offset, n in spans(data)])  # the same layout: `pack`'s
    except BaseException:
        region.give_back()
        raise
    finally:
        side.release(token)  # unmapped: the sender may write there again
    payload = Payload(_HEADER.pack(MARK, region.token, region.size, count) + data[_HEADER.size :])
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
        region.take()
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


def _release(side: _side.Holder | None, token: int) -> None:
    returned(token) if side is None else side.release(token)


def _size_class(n: int) -> int:
    """Region sizes are powers of two from 1 MiB, so a region serves payloads of nearby sizes."""
    return max(1 << 20, 1 << (n - 1).bit_length())


def _page(n: int) -> int:
    return (n + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE


# -- the side connection and what arrived on it ---------------------------------------------


def forget(data: bytes) -> None:
    """Let go of the descriptor that came for payload ``data``, which will not be loaded (its call was turned away)."""
    if not is_payload(data) or region_of(data) is not None:
        return
    with contextlib.suppress(LookupError):
        _let_go(*take(token := _HEADER.unpack_from(data)[1]), token)
