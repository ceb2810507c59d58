"""Routines for the large-value tests (issue 34): arrays that cross out of band, and a call turned away once."""

from __future__ import annotations

import os

import pool


@pool.routine
async def bump_first(array):
    """Add 1 to the first element of ``array`` in place (the worker's copy) and return it."""
    array[0] += 1
    return array


@pool.routine
async def arrived_mapped(array):
    """Whether ``array`` is built on a mapping (it crossed out of band), not on bytes read off the stream."""
    import mmap

    base = array.base
    while getattr(base, "base", None) is not None and not isinstance(base, memoryview):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


@pool.routine
async def checksum(array):
    """The sum of ``array`` and whether it arrived mapped (out of band)."""
    return float(array.sum()), await arrived_mapped.__wrapped__(array)


@pool.routine
async def checksum_nested(array):
    """Pass ``array`` on to a nested call (relayed by the pool) and return what it found."""
    return await checksum(array)


class TurnAwayOnce:
    """Backpressure that turns away the first offer of routine ``name`` in the whole pool (a marker file says
    it happened), so the pool must offer that call again: its arguments are sent a second time."""

    def __init__(self, marker: str, name: str) -> None:
        self.marker = marker
        self.name = name

    def __call__(self, ctx) -> bool:
        if not ctx.task.name.endswith(self.name):
            return False
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False
        return True
