"""A worker's resource signals: memory, event-loop lag, recent task durations. Sampled, so hooks read them for free.

A task arriving must be answered in microseconds, so the backpressure hook
never measures anything itself: a sampler on the worker's loop reads
memory and the loop's lag a few times a second (and, while a routine holds
the loop, the watch counts the time held as lag), and each finished task
adds its duration to a bounded window. Memory comes from ``/proc`` (Linux);
elsewhere the signals the platform cannot give stay None and the hooks that
read them accept.
"""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable
from typing import Final

SAMPLE_S: Final[float] = 0.2
"""How often memory and loop lag are sampled."""

LATENCY_WINDOW: Final[int] = 256
"""Task durations kept (hooks look at the last ``window`` of them)."""

LAG_DECAY: Final[float] = 0.5
"""Each sample keeps this share of the previous lag, so one late timer fades over a second or so."""

_PAGE: Final[int] = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class ResourceSignals:
    """The latest readings; `sample` refreshes them, `finished` records a task's duration."""

    def __init__(self) -> None:
        self.memory_bytes: int | None = None
        self.memory_fraction: float | None = None
        self.loop_lag_s = 0.0
        self.latencies: collections.deque[float] = collections.deque(maxlen=LATENCY_WINDOW)
        self._recent: tuple[float, ...] | None = ()
        self.sample_memory()

    def finished(self, seconds: float) -> None:
        self.latencies.append(seconds)
        self._recent = None

    def recent(self) -> tuple[float, ...]:
        """The kept durations, oldest first (one copy per change, however many hooks read it)."""
        if self._recent is None:
            self._recent = tuple(self.latencies)
        return self._recent

    def sample_memory(self) -> None:
        self.memory_bytes = rss_bytes()
        self.memory_fraction = host_memory_fraction()

    def lagged(self, seconds: float) -> None:
        """A timer fired ``seconds`` late: the lag is that, or what is left of a larger one."""
        self.loop_lag_s = max(seconds, self.loop_lag_s * LAG_DECAY)

    def p99(self) -> float:
        """The 99th percentile of the kept task durations (0 with none)."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[max(0, -(-99 * len(ordered) // 100) - 1)]

    async def run(self, sampled: Callable[[], None] | None = None) -> None:
        """Sample until cancelled (an owned task of the worker service), calling ``sampled`` after each."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + SAMPLE_S
            await asyncio.sleep(SAMPLE_S)
            self.lagged(max(0.0, loop.time() - due))
            self.sample_memory()
            if sampled is not None:
                sampled()


def rss_bytes() -> int | None:
    """This process's resident memory, or None where ``/proc`` is not there."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def host_memory_fraction() -> float | None:
    """The host's memory in use (1 - available / total), or None where ``/proc/meminfo`` is not there."""
    try:
        with open("/proc/meminfo", "rb") as f:
            fields = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
        total = int(fields[b"MemTotal"].split()[0])
        available = int(fields[b"MemAvailable"].split()[0])
    except (OSError, ValueError, KeyError, IndexError):
        return None
    return 1.0 - available / total if total else None
