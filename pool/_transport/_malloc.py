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
from typing import Final

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


def tune() -> None:
    """Apply the top pad once (Linux/glibc only; elsewhere nothing)."""
    global _done
    if _done or not sys.platform.startswith("linux"):
        return
    _done = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(M_TOP_PAD, TOP_PAD_BYTES)
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to tune
