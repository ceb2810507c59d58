"""joblib on leakypool beside loky (joblib's default), interleaved rounds, JSON out (docs/performance.md's (q2) and (r)).

(q2) ``Parallel(n_jobs=2)(delayed(f)(i) for i in range(100_000))`` of a trivial function, items/s;
(r) ``GridSearchCV(SVC(), grid, cv=5, n_jobs=2)`` on the digits data scikit-learn ships, wall time
(and that both backends give the same scores). Needs the ``joblib`` extra and scikit-learn::

    python -m bench.bench_joblib [--rounds 3] [--items 100000]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV
from sklearn.svm import SVC

import pool.joblib
from bench.support.workloads import WORKERS

GRID = {"C": [0.1, 1, 10], "gamma": ["scale", 0.001, 0.0001]}


def trivial(i: int) -> int:
    return i + 1


def q2(backend: str, items: int) -> float:
    with parallel_config(backend=backend, n_jobs=WORKERS):
        Parallel()(delayed(trivial)(i) for i in range(1000))  # warm: workers up, batch size learned afresh below
        t0 = time.perf_counter()
        Parallel()(delayed(trivial)(i) for i in range(items))
        return items / (time.perf_counter() - t0)


def r(backend: str) -> tuple[float, list[float]]:
    X, y = load_digits(return_X_y=True)
    with parallel_config(backend=backend, n_jobs=WORKERS):
        t0 = time.perf_counter()
        search = GridSearchCV(SVC(), GRID, cv=5, n_jobs=WORKERS).fit(X, y)
        return time.perf_counter() - t0, [float(s) for s in search.cv_results_["mean_test_score"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians reported)")
    parser.add_argument("--items", type=int, default=100_000, help="(q2) items")
    args = parser.parse_args()
    pool.joblib.register()
    rows: dict[str, dict[str, list[Any]]] = {b: {"q2": [], "r": []} for b in ("leakypool", "loky")}
    scores: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for backend in ("leakypool", "loky"):
            rows[backend]["q2"].append(q2(backend, args.items))
            seconds, scores[backend] = r(backend)
            rows[backend]["r"].append(seconds)
    pool.joblib.shutdown()
    lp_q2, lk_q2 = (statistics.median(rows[b]["q2"]) for b in ("leakypool", "loky"))
    lp_r, lk_r = (statistics.median(rows[b]["r"]) for b in ("leakypool", "loky"))
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "rounds": args.rounds,
                "q2_items_per_s": {"leakypool": round(lp_q2), "loky": round(lk_q2), "ratio": round(lp_q2 / lk_q2, 3)},
                "r_grid_search_s": {
                    "leakypool": round(lp_r, 3),
                    "loky": round(lk_r, 3),
                    "ratio": round(lp_r / lk_r, 3),
                    "same_scores": scores["leakypool"] == scores["loky"],
                },
                "rounds_detail": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
