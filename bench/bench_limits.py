"""What a queue, a concurrency key or a workflow key costs per call.

The same no-op routine, over ``spawn=2``, four ways: plain; in a queue
whose limit never binds; in that queue with a distinct concurrency key per
call (a gate made and dropped each time); with a distinct workflow key per
call. Sequential latency (p50, µs) and throughput at 256 in flight, with
the client's CPU per call. Prints one JSON object.

    python -m bench.bench_limits
"""

from __future__ import annotations

import itertools
import json
import time

import uvloop

import pool
from bench import routines
from bench.workloads import concurrent, sequential, summarize_us

CALLS, IN_FLIGHT, WARMUP = 5_000, 256, 500
QUEUE = pool.Queue("bench", concurrency=100_000)


def variants():
    keys = itertools.count()
    return {
        "plain": lambda: routines.noop(),
        "queue": lambda: routines.noop.options(queue=QUEUE)(),
        "queue_and_key": lambda: routines.noop.options(queue=QUEUE, key=f"k{next(keys)}")(),
        "workflow": lambda: routines.noop.options(workflow=f"w{next(keys)}")(),
    }


async def main() -> dict[str, object]:
    result: dict[str, object] = {}
    async with pool.WorkerPool(spawn=2):
        for name, call in variants().items():
            await sequential(call, WARMUP)
            latency = summarize_us(await sequential(call, 2_000))
            cpu0 = time.process_time()
            elapsed, errors = await concurrent(call, CALLS, IN_FLIGHT)
            cpu = time.process_time() - cpu0
            result[name] = {
                "latency_p50_us": latency["p50_us"],
                "latency_mean_us": latency["mean_us"],
                "tasks_per_s": round(CALLS / elapsed),
                "client_cpu_us_per_call": round(cpu / CALLS * 1e6, 1),
                "errors": errors,
            }
    plain = result["plain"]
    result["overhead_vs_plain"] = {
        name: {
            "latency_mean_us": round(r["latency_mean_us"] - plain["latency_mean_us"], 1),  # type: ignore[index]
            "client_cpu_us_per_call": round(r["client_cpu_us_per_call"] - plain["client_cpu_us_per_call"], 1),  # type: ignore[index]
        }
        for name, r in result.items()
        if name != "plain"
    }
    return result


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main()), indent=2))
