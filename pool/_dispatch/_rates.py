"""Rate limits: ``pool.RateLimit(n, per=seconds)`` on a `pool.Queue`, and the in-process book calls wait in.

    calls (this process):  at most n starts per ``per`` seconds per queue and key; a call over
                           the rate sleeps until the oldest start in its window leaves it (FIFO)
    jobs (every process):  kept in the store, counted in the lease transaction (see pool._jobs)

A window is sliding: in any ``per`` seconds, at most ``n`` starts.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import math
import time
from typing import Final

from .._base import public


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``n`` starts per ``per`` seconds (per concurrency key, when calls name one).

    Args:
        n: Starts allowed in any window of ``per`` seconds (>= 1).
        per: The window, in seconds (> 0).
    """

    n: int
    per: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n: expected an int >= 1 (starts per window), got {self.n!r}")
        per = self.per
        if isinstance(per, bool) or not isinstance(per, (int, float)) or not (per > 0 and math.isfinite(per)):
            raise ValueError(f"per: expected seconds > 0, got {per!r}")


def next_start(starts: collections.deque[float], n: int, per: float, now: float) -> float:
    """When one more start fits (``now`` if it does): I/O-free. Drops starts that left the window."""
    while starts and starts[0] <= now - per:
        starts.popleft()
    return now if len(starts) < n else starts[-n] + per


SWEEP_KEYS: Final[int] = 1024
"""Keys the book holds before it forgets those whose window emptied."""


class RateBook:
    """The recent (and reserved) starts of calls per (queue, key) in this process.

    A call over the rate reserves the first start that fits and sleeps until
    it, and nothing polls. Waiting calls of one key start in arrival order:
    each waits for the one before it too, since two timers due at the same
    moment may fire in either order.
    """

    def __init__(self) -> None:
        self._starts: dict[tuple[str, str], collections.deque[float]] = {}
        self._last: dict[tuple[str, str], asyncio.Future[None]] = {}

    async def wait(self, queue: str, key: str, n: int, per: float) -> None:
        """Return once a start of (``queue``, ``key``) fits ``n`` per ``per`` seconds, that start counted."""
        now = time.monotonic()
        if len(self._starts) > SWEEP_KEYS:
            self._starts = {k: v for k, v in self._starts.items() if v and v[-1] > now - per}
            self._last = {k: f for k, f in self._last.items() if not f.done()}
        starts = self._starts.setdefault((queue, key), collections.deque())
        at = next_start(starts, n, per, now)
        starts.append(at)  # reserved, even if this caller gives up: never more than n in a window
        before = self._last.get((queue, key))
        if at <= now and (before is None or before.done()):
            return
        mine = self._last[(queue, key)] = asyncio.get_running_loop().create_future()
        try:
            if before is not None:
                await asyncio.shield(before)  # a caller that gives up still lets its successors on
            await asyncio.sleep(max(0.0, at - time.monotonic()))
        finally:
            mine.set_result(None)


public(RateLimit)
