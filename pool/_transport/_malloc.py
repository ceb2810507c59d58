"""Keep glibc from returning heap memory between large messages.

protobuf's upb arenas allocate and free a block the size of each large
message. With glibc's default (dynamic) trim threshold, freeing it shrinks
the heap (brk) and the next message grows it again, faulting in fresh
zeroed pages every time: a 1 MiB call then costs ~1.5 ms of allocator work
per message instead of ~0.1 ms (measured with bench (d)). Keeping a pad of
free memory at the top of the heap (M_TOP_PAD) removes that churn.

Setting any such parameter also turns off glibc's dynamic mmap threshold,
which otherwise rises to the size of the largest block freed: left at its
128 KiB start, every 1 MiB block would be a fresh mmap() and 256 page
faults, and a 1 MiB echo took 6-13 ms instead of ~2 ms (measured: the same
process alternated between the two depending on what its heap had seen).
So the threshold is set to the dynamic one's own ceiling, 32 MiB.

Workers apply it at start; a dispatching process applies it the first time
it sends or receives a large value, so processes that never do pay nothing.
The pad is memory the process may keep after a large message: 16 MiB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any, Final

M_TOP_PAD: Final[int] = -2
"""glibc's mallopt() parameter number for the top pad."""

M_MMAP_THRESHOLD: Final[int] = -3
"""glibc's mallopt() parameter number for the size from which blocks are mmap()ed."""

MMAP_THRESHOLD_BYTES: Final[int] = 32 << 20
"""Blocks up to this size come from the heap, not from a fresh mmap() each (see the module docstring)."""

TOP_PAD_BYTES: Final[int] = 16 << 20
"""Free heap kept at the top after a large message is freed."""

LARGE_BYTES: Final[int] = 256 << 10
"""A value this big (pickled) triggers the tuning in a dispatching process."""

_done = False
_trimmed = True  # no large value since the heap was last trimmed (`trim`)


def _libc(*, use_errno: bool = False) -> ctypes.CDLL:
    """The C library (glibc's soname first: ``find_library`` runs ``ldconfig -p``, ~5 ms per process).

    Raises:
        OSError: there is no C library to load by either name.
    """
    try:
        return ctypes.CDLL("libc.so.6", use_errno=use_errno)
    except OSError:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so", use_errno=use_errno)


def tune() -> None:
    """A large value was made or read: apply the top pad once (Linux/glibc only; elsewhere nothing)."""
    global _done, _trimmed
    _trimmed = False
    if _done or not sys.platform.startswith("linux"):
        return
    _done = True
    try:
        libc = _libc()
        libc.mallopt(M_TOP_PAD, TOP_PAD_BYTES)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune


HUGE_PAGE_BYTES: Final[int] = 2 << 20
"""A transparent huge page (x86-64, arm64 with 4 KiB pages)."""

MADV_HUGEPAGE: Final[int] = 14
"""madvise(): back this range with transparent huge pages where the system allows it ("madvise" mode)."""

_BYTES_DATA_OFFSET: Final[int] = bytes.__basicsize__ - 1
"""Where a CPython bytes object's data starts (``ob_sval``)."""


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (stable ABI since 3.11): what ``PyObject_GetBuffer`` fills in."""

    _fields_ = (
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.c_void_p),
        ("strides", ctypes.c_void_p),
        ("suboffsets", ctypes.c_void_p),
        ("internal", ctypes.c_void_p),
    )


def _native() -> tuple[Any, Any] | None:
    """CPython's uninitialised-bytes constructor and libc's madvise, or None where not both are there."""
    if sys.implementation.name != "cpython" or not sys.platform.startswith("linux"):
        return None
    try:
        libc = _libc(use_errno=True)
        madvise = libc.madvise
        madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        new = ctypes.pythonapi.PyBytes_FromStringAndSize
        new.restype = ctypes.py_object
        new.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
    except (OSError, AttributeError):
        return None
    return new, madvise


_NATIVE = _native()


def to_bytes(buffer: memoryview) -> bytes:
    """A new `bytes` holding ``buffer`` (C-contiguous), the copy done on huge pages, the GIL released.

    ``bytes(buffer)`` faults the new object's pages in 4 KiB at a time (a
    large object is a fresh mmap()), about twice the cost of the copy
    itself, and holds the GIL throughout. Here the object is made
    uninitialised, its pages are asked to be huge, and ctypes' memmove (a
    foreign call: the GIL is released) fills it. Elsewhere: ``bytes(buffer)``.
    """
    global _trimmed
    _trimmed = False
    if _NATIVE is None or not buffer.c_contiguous:
        return bytes(buffer)
    new, madvise = _NATIVE
    size = buffer.nbytes
    out = new(None, size)
    address = id(out) + _BYTES_DATA_OFFSET
    start = -(-address // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES
    end = (address + size) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES
    if end > start:
        madvise(start, end - start, MADV_HUGEPAGE)  # a refusal only costs the speed-up
    view = _PyBuffer()
    if ctypes.pythonapi.PyObject_GetBuffer(ctypes.py_object(buffer), ctypes.byref(view), 0) != 0:
        return bytes(buffer)
    try:
        ctypes.memmove(address, view.buf, size)
    finally:
        ctypes.pythonapi.PyBuffer_Release(ctypes.byref(view))
    return out


def large_since_trim() -> bool:
    """Whether a large value was made or read since the heap was last trimmed (see `trim`)."""
    return not _trimmed


def trim() -> None:
    """Give the heap's free top and arenas back to the system (glibc's ``malloc_trim(0)``; elsewhere nothing)."""
    global _trimmed
    _trimmed = True
    if not sys.platform.startswith("linux"):
        return
    try:
        _libc().malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc
