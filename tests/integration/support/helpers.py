"""Small waits on a pool's own events, for tests."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Final

import pool

HANG_S: Final[float] = 30.0
"""How long a test waits for something that must happen: it bounds a hung (broken) run, never a pace.

A test waits this long only on an event its defect would lose for good (a call that is never
accepted, a routine that is never released): a slow or busy machine is late by seconds, a
defect forever. Timing claims (how fast) belong in bench/, not here.
"""


async def until_members(
    p: pool.WorkerPool, predicate: Callable[[pool.WorkerPool], bool], timeout: float = 30.0
) -> None:
    """Wait until ``predicate(p)`` holds, re-checking on each membership change."""
    await p._layers.membership.until(lambda: predicate(p), timeout)


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0, interval: float = 0.01
) -> None:
    """Wait until ``condition()`` holds, checking every ``interval`` s, at most ``timeout`` s.

    For state that no event announces (a pool's queue length, a worker's own
    report, a process that is not our child, a server's answer):
    ``condition`` may be a plain function or an ``async def`` one. Raises
    TimeoutError.
    """
    async with asyncio.timeout(timeout):
        while True:
            held = condition()
            if inspect.isawaitable(held):
                held = await held
            if held:
                return
            await asyncio.sleep(interval)
