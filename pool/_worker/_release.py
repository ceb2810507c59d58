"""Memory a finished call leaves behind: given back to the system once the worker has been idle a while.

A large value crosses in a memfd region (`_transport._buffers`) that is kept for reuse, so the
next large call copies at memory speed instead of faulting fresh pages in (about 1 s per GiB
here); the heap keeps its top pad and freed arenas too. Kept forever, a worker that once took a
1 GiB call would hold 1.5 GiB it no longer uses. So once nothing has been in flight for
`RELEASE_AFTER_S`, the idle regions are closed and the heap trimmed (``malloc_trim``), once per
idle spell: a worker busy with large calls keeps its regions; one left idle shrinks back.
"""

from __future__ import annotations

import time
from typing import Final

from .._transport import buffers, malloc

RELEASE_AFTER_S: Final[float] = 2.0
"""Idle this long, a worker gives back the regions it kept and trims its heap (its RSS is back within seconds)."""


class IdleRelease:
    """Gives memory back once per idle spell (called at each resource sample, `_signals.SAMPLE_S`)."""

    __slots__ = ("_released_at",)

    def __init__(self) -> None:
        self._released_at = 0.0  # the idle spell (its start) last released for

    def tick(self, in_flight: int, idle_since: float) -> None:
        """Release if nothing has been in flight for `RELEASE_AFTER_S` and this spell was not released yet."""
        if in_flight or idle_since == self._released_at or time.monotonic() - idle_since < RELEASE_AFTER_S:
            return
        self._released_at = idle_since
        if buffers.release_idle() or malloc.large_since_trim():
            malloc.trim()
