"""Small waits on a pool's own events, for tests."""

from __future__ import annotations

from collections.abc import Callable

import pool


async def until_members(p: pool.WorkerPool, predicate: Callable[[pool.WorkerPool], bool], timeout: float = 30.0) -> None:
    """Wait until ``predicate(p)`` holds, re-checking on each membership change."""
    await p._membership.until(lambda: predicate(p), timeout)
