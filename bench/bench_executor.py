"""(q) ``pool.Executor.map`` of a trivial plain function against ``ProcessPoolExecutor.map``, same run.

100,000 items (``--items``), two workers on each side, at chunksize 1 (one
worker call per item: the round trip and the dispatching CPU per call set the
ceiling) and 64 (one call per 64 items). Each side is warmed up first (its
workers started and the function loaded), then timed from the ``map`` call
to the last result. Targets (docs/performance.md): chunksize 1 at least 1.5x
ProcessPoolExecutor's items/s, chunksize 64 no slower. Prints one JSON object.

    python -m bench.bench_executor [--items 100000] [--workers 2]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import time
from collections.abc import Callable

import pool

CHUNKSIZES = (1, 64)


def trivial(x: int) -> int:
    """The mapped function: as little work as a call can hold."""
    return x + 1


def measure(make: Callable[[int], cf.Executor], workers: int, items: int) -> dict[str, float]:
    """Items per second of ``map`` at each chunksize, on one executor."""
    out: dict[str, float] = {}
    with make(workers) as ex:
        assert list(ex.map(trivial, range(workers * 4))) == [i + 1 for i in range(workers * 4)]  # warm up
        for chunksize in CHUNKSIZES:
            start = time.perf_counter()
            total = sum(ex.map(trivial, range(items), chunksize=chunksize))
            elapsed = time.perf_counter() - start
            assert total == items * (items + 1) // 2
            out[f"chunksize_{chunksize}_items_per_s"] = round(items / elapsed)
            out[f"chunksize_{chunksize}_s"] = round(elapsed, 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000, help="items mapped at each chunksize")
    parser.add_argument("--workers", type=int, default=2, help="worker processes on each side")
    args = parser.parse_args()
    leaky = measure(pool.Executor, args.workers, args.items)
    peer = measure(cf.ProcessPoolExecutor, args.workers, args.items)
    ratios = {
        f"chunksize_{c}_ratio": round(leaky[f"chunksize_{c}_items_per_s"] / peer[f"chunksize_{c}_items_per_s"], 2)
        for c in CHUNKSIZES
    }
    print(
        json.dumps(
            {
                "bench": "q_executor_map",
                "items": args.items,
                "workers": args.workers,
                "leakypool": leaky,
                "ProcessPoolExecutor": peer,
                "leakypool_over_processpool": ratios,
                "targets": {"chunksize_1_ratio": ">= 1.5", "chunksize_64_ratio": ">= 1.0"},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
