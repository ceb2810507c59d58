"""leakypool on docs/performance.md's workloads (a)-(e), plus a busy worker's answer time.

Prints one JSON object. Run from the repository root::

    python -m bench.bench_pool            # full run
    python -m bench.bench_pool --quick    # 1/10 sizes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from functools import partial

import uvloop

import pool
from backpressure import TaskCountBackpressure
from bench.support import routines
from bench.support.workloads import (
    COLD_REPEATS,
    IO_CALLS,
    IO_CONCURRENCY,
    IO_SLEEP_S,
    IO_WARMUP,
    LAT_CALLS,
    LAT_WARMUP,
    PAYLOAD_BYTES,
    PAYLOAD_CALLS,
    PAYLOAD_WARMUP,
    TP_CALLS,
    TP_CONCURRENCY,
    TP_WARMUP,
    WORKERS,
    concurrent,
    log,
    proc_cpu_s,
    sequential,
    summarize_us,
)


async def cold_start() -> dict[str, float]:
    t0 = time.perf_counter()
    async with pool.WorkerPool(spawn=WORKERS, shutdown_grace=1):
        t_enter = time.perf_counter()
        await routines.noop()
        t_first = time.perf_counter()
    return {"enter_s": round(t_enter - t0, 4), "first_result_s": round(t_first - t0, 4)}


async def throughput(call, total: int, concurrency: int, warmup: int, pids: list[int]) -> dict[str, object]:
    if warmup:
        await concurrent(call, warmup, concurrency)
    cpu0, w0 = time.process_time(), [proc_cpu_s(p) for p in pids]
    elapsed, errors = await concurrent(call, total, concurrency)
    cpu1, w1 = time.process_time(), [proc_cpu_s(p) for p in pids]
    return {
        "calls": total,
        "concurrency": concurrency,
        "elapsed_s": round(elapsed, 3),
        "tasks_per_s": round(total / elapsed, 1),
        "errors": errors,
        "client_cpu_us_per_call": round((cpu1 - cpu0) / total * 1e6, 1),
        # A worker whose /proc entry could not be read (it exited) counts for nothing rather than a guess.
        "workers_cpu_us_per_call": round(
            sum(b - a for a, b in zip(w0, w1, strict=False) if a is not None and b is not None) / total * 1e6, 1
        ),
    }


async def busy_answer_ms(samples: int = 20) -> dict[str, float]:
    """While a routine spins the CPU, how long a worker takes to accept / reject a dispatch."""
    async with pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(1)) as p:
        task = routines.noop.task((), {})
        rejected = []
        spinning = asyncio.ensure_future(routines.spin(samples * 0.1 + 1.0))
        await asyncio.sleep(0.3)
        for _ in range(samples):
            t0 = time.perf_counter()
            try:
                await p.dispatch(task)
            except pool.NoWorkersAvailable:
                rejected.append(time.perf_counter() - t0)
            await asyncio.sleep(0.05)
        await spinning
    async with pool.WorkerPool(spawn=1) as p:
        accepted = []
        spinning = asyncio.ensure_future(routines.spin(samples * 0.1 + 1.0))
        await asyncio.sleep(0.3)
        for _ in range(samples):
            t0 = time.perf_counter()
            call = await p.dispatch(task)
            accepted.append(time.perf_counter() - t0)
            call.cancel()
            await asyncio.sleep(0.05)
        await spinning
    return {
        "reject_p50_ms": round(sorted(rejected)[len(rejected) // 2] * 1e3, 2),
        "reject_max_ms": round(max(rejected) * 1e3, 2),
        "accept_p50_ms": round(sorted(accepted)[len(accepted) // 2] * 1e3, 2),
        "accept_max_ms": round(max(accepted) * 1e3, 2),
    }


async def main(quick: bool) -> dict[str, object]:
    scale = 10 if quick else 1
    result: dict[str, object] = {
        "runtime": "leakypool",
        "version": pool.__version__,
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "workers": WORKERS,
        "quick": quick,
    }
    log("(e) cold start")
    result["e_cold_start_first"] = await cold_start()
    async with pool.WorkerPool(spawn=WORKERS) as p:
        pids = p.pids
        await sequential(routines.noop, LAT_WARMUP)
        log("(a) latency")
        result["a_noop_latency"] = summarize_us(await sequential(routines.noop, max(10, LAT_CALLS // scale)))
        log("(b) no-op throughput")
        result["b_noop_throughput"] = await throughput(
            routines.noop, TP_CALLS // scale, TP_CONCURRENCY, TP_WARMUP // scale, pids
        )
        log("(c) sleep throughput")
        c = await throughput(
            partial(routines.sleeper, IO_SLEEP_S), IO_CALLS // scale, IO_CONCURRENCY, IO_WARMUP // scale, pids
        )
        c["ideal_tasks_per_s_if_unbounded"] = IO_CONCURRENCY / IO_SLEEP_S
        result["c_sleep_throughput"] = c
        log("(d) 1 MiB echo")
        call = partial(routines.echo, os.urandom(PAYLOAD_BYTES))
        await sequential(call, PAYLOAD_WARMUP)
        s = summarize_us(await sequential(call, max(10, PAYLOAD_CALLS // scale)))
        result["d_echo_1mib"] = {
            "n": s["n"],
            "p50_ms": round(s["p50_us"] / 1e3, 3),
            "p99_ms": round(s["p99_us"] / 1e3, 3),
        }
    log("(e) cold start repeats")
    reps = sorted([await cold_start() for _ in range(COLD_REPEATS)], key=lambda r: r["first_result_s"])
    result["e_cold_start_repeats"] = reps
    result["e_cold_start_median_first_result_s"] = reps[len(reps) // 2]["first_result_s"]
    log("busy worker answer time")
    result["busy_worker_answer"] = await busy_answer_ms(10 if quick else 30)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 sizes")
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(args.quick)), indent=2))
