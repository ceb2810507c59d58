"""A BLAS-heavy map on 2 workers: leakypool capped (the default), uncapped, and joblib's loky, in one sitting.

Issue 53: two workers on two cores each running a multithreaded BLAS oversubscribe the machine; loky
caps each worker at ``cpu_count() // n_jobs`` threads, and so does leakypool now. Prints one JSON object:
the wall time of each, in rounds whose order rotates, and the medians' ratios. Needs numpy and joblib::

    python -m bench.bench_blas                 # 200 products, 3 rounds
    python -m bench.bench_blas --items 50 --rounds 1

On machines where OPENBLAS_CORETYPE is set (see the environment notes), unset it for this command alone
to measure a current numpy's own kernel.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import pool
from bench.support.blas import product

WORKERS = 2


def leakypool_run(items: int, cap: int | None) -> float:
    with pool.Executor(WORKERS, max_threads_per_worker=cap) as ex:
        list(ex.map(product, range(WORKERS * 2)))  # warm: workers started, numpy imported there
        started = time.perf_counter()
        list(ex.map(product, range(items)))
        return time.perf_counter() - started


def loky_run(items: int) -> float:
    from joblib import Parallel, delayed

    with Parallel(n_jobs=WORKERS, backend="loky") as parallel:
        parallel(delayed(product)(i) for i in range(WORKERS * 2))
        started = time.perf_counter()
        parallel(delayed(product)(i) for i in range(items))
        return time.perf_counter() - started


def main(items: int, rounds: int) -> dict[str, object]:
    runs: dict[str, Callable[[], float]] = {
        "leakypool": lambda: leakypool_run(items, None),
        "leakypool_uncapped": lambda: leakypool_run(items, 0),
        "loky": lambda: loky_run(items),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            times[name].append(runs[name]())
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "items": items,
        "workers": WORKERS,
        "seconds": {name: [round(t, 3) for t in values] for name, values in times.items()},
        "median_s": {name: round(t, 3) for name, t in medians.items()},
        "leakypool_vs_loky": round(medians["leakypool"] / medians["loky"], 3),
        "uncapped_vs_loky": round(medians["leakypool_uncapped"] / medians["loky"], 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(main(args.items, args.rounds), indent=2))
