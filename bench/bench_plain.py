"""Plain ``def`` functions on the pool (docs/performance.md's workload (p), and (a)/(b) with a plain no-op), beside ProcessPoolExecutor.

(p) 400 calls of a plain function that burns ~20 ms of pure-Python CPU, on 2 workers: wall time
against the ideal (400 x 20 ms / 2) and against ProcessPoolExecutor's, in the same run.
(a) sequential plain no-op round trip p50/p99; (b) 10,000 plain no-op calls, 256 in flight.
Prints one JSON object::

    python -m bench.bench_plain [--quick] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures as cf
import json
import platform
import statistics
import time
from typing import Any

import uvloop

import pool
from bench.support.plain_routines import burn, calibrate, noop_plain, plain_burn, plain_noop
from bench.support.workloads import (
    LAT_CALLS,
    LAT_WARMUP,
    TP_CALLS,
    TP_CONCURRENCY,
    WORKERS,
    concurrent,
    sequential,
    summarize_us,
)

P_CALLS = 400


async def leakypool_round(iterations: int, calls: int, lat_calls: int, tp_calls: int) -> dict[str, Any]:
    async with pool.WorkerPool(spawn=WORKERS) as p:
        await p.wait_for_workers(WORKERS)
        await asyncio.gather(*(plain_burn(iterations) for _ in range(WORKERS * 2)))  # warm-up
        t0 = time.perf_counter()
        await asyncio.gather(*(plain_burn(iterations) for _ in range(calls)))
        p_wall = time.perf_counter() - t0
        await sequential(plain_noop, LAT_WARMUP)
        lat = summarize_us(await sequential(plain_noop, lat_calls))
        elapsed, errors = await concurrent(plain_noop, tp_calls, TP_CONCURRENCY)
    return {
        "p_wall_s": round(p_wall, 3),
        "a_plain_noop": lat,
        "b_plain_noop_per_s": round(tp_calls / elapsed, 1),
        "b_errors": errors,
    }


def processpool_round(iterations: int, calls: int, lat_calls: int, tp_calls: int) -> dict[str, Any]:
    with cf.ProcessPoolExecutor(WORKERS) as ex:
        list(ex.map(burn, [iterations] * WORKERS * 2))
        t0 = time.perf_counter()
        list(ex.map(burn, [iterations] * calls))
        p_wall = time.perf_counter() - t0
        samples = []
        for i in range(LAT_WARMUP + lat_calls):
            t1 = time.perf_counter()
            ex.submit(noop_plain).result()
            if i >= LAT_WARMUP:
                samples.append(time.perf_counter() - t1)
        t2 = time.perf_counter()
        futures = [ex.submit(noop_plain) for _ in range(tp_calls)]
        cf.wait(futures)
        tp = tp_calls / (time.perf_counter() - t2)
    return {"p_wall_s": round(p_wall, 3), "a_plain_noop": summarize_us(samples), "b_plain_noop_per_s": round(tp, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/4 of the calls")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians reported)")
    args = parser.parse_args()
    scale = 4 if args.quick else 1
    calls, lat_calls, tp_calls = P_CALLS // scale, LAT_CALLS // scale, TP_CALLS // scale
    iterations = calibrate()
    t0 = time.perf_counter()
    burn(iterations)
    one_burn_s = time.perf_counter() - t0
    ours, peers = [], []
    for _ in range(args.rounds):
        ours.append(uvloop.run(leakypool_round(iterations, calls, lat_calls, tp_calls)))
        peers.append(processpool_round(iterations, calls, lat_calls, tp_calls))
    ideal = calls * one_burn_s / WORKERS

    def median(rows: list[dict[str, object]], key: str) -> float:
        return statistics.median(float(row[key]) for row in rows)  # type: ignore[arg-type]

    lp, pp = median(ours, "p_wall_s"), median(peers, "p_wall_s")
    print(
        json.dumps(
            {
                "machine": platform.machine(),
                "python": platform.python_version(),
                "rounds": args.rounds,
                "p": {
                    "calls": calls,
                    "one_call_s": round(one_burn_s, 4),
                    "ideal_s": round(ideal, 3),
                    "leakypool_s": lp,
                    "processpool_s": pp,
                    "leakypool_vs_ideal": round(lp / ideal, 3),
                    "leakypool_vs_processpool": round(lp / pp, 3),
                },
                "a_plain_noop_p50_us": {
                    "leakypool": statistics.median(r["a_plain_noop"]["p50_us"] for r in ours),
                    "processpool": statistics.median(r["a_plain_noop"]["p50_us"] for r in peers),
                },
                "b_plain_noop_per_s": {
                    "leakypool": median(ours, "b_plain_noop_per_s"),
                    "processpool": median(peers, "b_plain_noop_per_s"),
                },
                "rounds_detail": {"leakypool": ours, "processpool": peers},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
