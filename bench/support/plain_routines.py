"""Plain ``def`` functions the plain-function benchmarks run (importable by name in workers and in peers)."""

from __future__ import annotations

import time

import pool


def burn(iterations: int) -> int:
    """Pure-Python CPU work: ``iterations`` multiply-adds (a fixed amount of work, the same for every pool)."""
    total = 0
    for i in range(iterations):
        total += i * i
    return total


def calibrate(target_s: float = 0.020) -> int:
    """The iterations that make `burn` take about ``target_s`` here (median of a few tries)."""
    n = 100_000
    tries = []
    for _ in range(5):
        t0 = time.perf_counter()
        burn(n)
        tries.append(time.perf_counter() - t0)
    per_iteration = sorted(tries)[2] / n
    return max(1, int(target_s / per_iteration))


def noop_plain(_: object = None) -> None:
    return None


plain_noop = pool.routine(noop_plain)
plain_burn = pool.routine(burn)
