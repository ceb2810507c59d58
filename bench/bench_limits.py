"""What a queue, a concurrency key or a workflow key costs per call.

First the limits alone, without the network (CPU per acquire + release).
Then the same no-op routine, over ``spawn=2``, four ways: plain; in a queue
whose limit never binds; in that queue with a distinct concurrency key per
call (a gate made and dropped each time); with a distinct workflow key per
call. Sequential latency (p50, µs) and throughput at 256 in flight, with
the client's CPU per call. Prints one JSON object.

    python -m bench.bench_limits
"""

from __future__ import annotations

import itertools
import json
import statistics
import time

import uvloop

import pool
from bench.support import routines
from bench.support.workloads import concurrent, sequential, summarize_us
from pool._dispatch._limits import Limits, Ticket

CALLS, IN_FLIGHT, WARMUP, ROUNDS = 5_000, 256, 200, 3
QUEUE = pool.Queue("bench", concurrency=100_000)


def variants():
    keys = itertools.count()
    return {
        "plain": lambda: routines.noop(),
        "queue": lambda: routines.noop.options(queue=QUEUE)(),
        "queue_and_key": lambda: routines.noop.options(queue=QUEUE, key=f"k{next(keys)}")(),
        "workflow": lambda: routines.noop.options(workflow=f"w{next(keys)}")(),
    }


async def gate_cost_us(n: int = 50_000) -> dict[str, float]:
    """The limits alone, no network: acquire + release of each kind, per call (µs of CPU)."""
    keys = itertools.count()
    kinds = {
        "queue": lambda: routines.noop.options(queue=QUEUE).task((), {}),
        "queue_and_key": lambda: routines.noop.options(queue=QUEUE, key=f"k{next(keys)}").task((), {}),
        "workflow": lambda: routines.noop.options(workflow=f"w{next(keys)}").task((), {}),
    }
    out = {}
    for name, make in kinds.items():
        limits = Limits()
        tickets = [Ticket(make(), None, 0.0) for _ in range(n)]
        t0 = time.process_time()
        for ticket in tickets:
            await limits.acquire(ticket)
            limits.release(ticket)
        out[name] = round((time.process_time() - t0) / n * 1e6, 2)
    return out


async def main() -> dict[str, object]:
    result: dict[str, object] = {"gate_cpu_us_per_call": await gate_cost_us()}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants()}
    async with pool.WorkerPool(spawn=2):
        for _ in range(ROUNDS):  # interleaved, so a slow spell of the machine hits every variant
            for name, call in variants().items():
                await sequential(call, WARMUP)
                latency = summarize_us(await sequential(call, 1_000))
                cpu0 = time.process_time()
                elapsed, errors = await concurrent(call, CALLS, IN_FLIGHT)
                cpu = time.process_time() - cpu0
                assert not errors, errors
                rounds[name].append(
                    {
                        "latency_p50_us": latency["p50_us"],
                        "latency_mean_us": latency["mean_us"],
                        "tasks_per_s": CALLS / elapsed,
                        "client_cpu_us_per_call": cpu / CALLS * 1e6,
                    }
                )
    for name, samples in rounds.items():
        result[name] = {key: round(statistics.median(s[key] for s in samples), 1) for key in samples[0]}
    plain = result["plain"]
    result["overhead_vs_plain"] = {
        name: {
            "latency_mean_us": round(r["latency_mean_us"] - plain["latency_mean_us"], 1),  # type: ignore[index]
            "client_cpu_us_per_call": round(r["client_cpu_us_per_call"] - plain["client_cpu_us_per_call"], 1),  # type: ignore[index]
        }
        for name, r in result.items()
        if name not in ("plain", "gate_cpu_us_per_call")
    }
    return result


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main()), indent=2))
