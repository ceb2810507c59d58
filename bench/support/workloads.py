"""The workloads of docs/performance.md (by letter), shared by leakypool's benchmarks.

Sizes and measurement helpers match ``../shared/bench-peers`` so figures
from one sitting compare directly.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

WORKERS = 2
LAT_CALLS, LAT_WARMUP = 2_000, 200
TP_CALLS, TP_CONCURRENCY, TP_WARMUP = 10_000, 256, 1_000
IO_CALLS, IO_CONCURRENCY, IO_SLEEP_S, IO_WARMUP = 5_000, 1_000, 0.05, 200
PAYLOAD_BYTES, PAYLOAD_CALLS, PAYLOAD_WARMUP = 1 << 20, 200, 10
COLD_REPEATS = 3


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100), as the peer benchmarks compute it."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def summarize_us(samples_s: list[float]) -> dict[str, float]:
    us = [s * 1e6 for s in samples_s]
    return {
        "n": len(us),
        "p50_us": round(percentile(us, 50), 1),
        "p90_us": round(percentile(us, 90), 1),
        "p99_us": round(percentile(us, 99), 1),
        "mean_us": round(sum(us) / len(us), 1),
    }


async def sequential(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return samples


async def concurrent(call: Callable[[], Awaitable[Any]], total: int, concurrency: int) -> tuple[float, dict[str, int]]:
    """``total`` calls, ``concurrency`` in flight; (elapsed seconds, errors by type)."""
    remaining = total
    errors: dict[str, int] = {}

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                await call()
            except Exception as exc:  # noqa: BLE001 - counted by type and reported beside the figure
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(min(concurrency, total))))
    return time.perf_counter() - t0, errors


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)
