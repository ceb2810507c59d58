"""Workload (s)'s cases, floor and peak-RSS probes, shared by bench_large and its peer scripts.

Imports only numpy and the standard library, so a peer script run in a venv
of its own (bench/peer_large_ray.py: no ``pool`` there) uses the same cases
and the same floor as ``bench.bench_large``.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

MIB = 1 << 20
ARRAY_SIZES = (1 * MIB, 16 * MIB, 128 * MIB, 1024 * MIB)
BYTES_SIZE = 128 * MIB
KINDS = ("echo", "arg", "result")


def cases(quick: bool) -> list[tuple[str, int]]:
    """(payload kind, size) of every case; ``quick`` leaves out 1 GiB."""
    return [("array", s) for s in ARRAY_SIZES if not (quick and s > 128 * MIB)] + [("bytes", BYTES_SIZE)]


def payload(kind: str, size: int) -> Any:
    """The value a caller sends: a float64 array, or as many ``bytes``."""
    return np.arange(size // 8, dtype=np.float64) if kind == "array" else np.arange(size // 8).tobytes()


def floor_s(size: int, copies: int, reps: int = 5) -> float:
    """``copies`` np.copyto of ``size`` bytes into touched memory, p50."""
    src = np.ones(size // 8)
    dst = [np.zeros(size // 8) for _ in range(copies)]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for d in dst:
            np.copyto(d, src)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def floors(sizes: list[tuple[str, int]]) -> dict[str, dict[str, float]]:
    """The floor of every size among ``sizes`` (one copy, two copies), in ms, keyed by MiB as the JSON has it."""
    return {
        str(s // MIB): {"one_copy_ms": round(floor_s(s, 1) * 1e3, 2), "two_copies_ms": round(floor_s(s, 2) * 1e3, 2)}
        for s in sorted({s for _, s in sizes})
    }


def status_kib(pid: int, field: str) -> int:
    """A ``kB`` field of /proc/PID/status (``VmHWM``, ``RssShmem``); 0 once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:  # the process exited
        pass
    return 0


def hwm_kib(pid: int) -> int:
    """The peak RSS of ``pid`` since its last `reset_hwm`."""
    return status_kib(pid, "VmHWM")


def reset_hwm(pid: int) -> None:
    """Start ``pid``'s peak RSS afresh (Linux 4.0+); nothing where it cannot."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
