"""Which side of the pool this process is on: a worker's entry point says so once, at start."""

from __future__ import annotations

_worker = False


def become_worker() -> None:
    """Mark this process as a leakypool worker (called by the worker's entry point before any call runs)."""
    global _worker
    _worker = True


def in_worker() -> bool:
    """Whether this process is a leakypool worker (code running in a routine, or its nested library calls)."""
    return _worker
