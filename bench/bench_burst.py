"""Seed 000's burst, scaled in time: 3,704 tasks at once, 200 running at a time.

Each task awaits ``asyncio.sleep(2.29)`` (the seed's 229 s, scaled by
1/100). Two workers take 100 tasks each (TaskCountBackpressure(100)), so
200 run at a time. Two runs:

- two-phase admission: queue depth 3,600 (the burst is queued);
- no queue: queue depth 0 and a 0.3 s admission wait (the legacy behaviour).

Reports, per run, how many tasks were rejected and the drain time against
the ideal 3,704 / 200 x 2.29 s. Targets: 0 rejected, drain within 15% of
ideal. Prints one JSON object.

    python -m bench.bench_burst [--scale 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time

import uvloop

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from bench.support import routines

TASKS = 3_704
PER_WORKER = 100
WORKERS = 2
TASK_S = 2.29


async def burst(tasks: int, task_s: float, queue_depth: int, admission_timeout: float) -> dict[str, object]:
    ideal = tasks / (PER_WORKER * WORKERS) * task_s
    async with pool.WorkerPool(
        spawn=WORKERS,
        backpressure=TaskCountBackpressure(PER_WORKER),
        loadbalancer=PriorityLoadBalancer(),
        queue_depth=queue_depth,
        admission_timeout=admission_timeout,
        dispatch_deadline=max(60.0, ideal * 3),
    ) as p:
        outcomes: collections.Counter[str] = collections.Counter()

        async def one() -> None:
            try:
                await routines.sleeper(task_s)
                outcomes["completed"] += 1
            except pool.PoolError as exc:
                outcomes[type(exc).__name__] += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(tasks)))
        elapsed = time.perf_counter() - t0
        stats = p.stats()
    completed = outcomes.pop("completed", 0)
    return {
        "tasks": tasks,
        "queue_depth": queue_depth,
        "admission_timeout_s": admission_timeout,
        "completed": completed,
        "rejected": sum(outcomes.values()),
        "rejected_by_error": dict(outcomes),
        "drain_s": round(elapsed, 2),
        "ideal_drain_s": round(ideal, 2),
        "drain_over_ideal": round(elapsed / ideal, 3),
        "dispatched": stats.dispatched,
    }


async def main(scale: float) -> dict[str, object]:
    tasks = int(TASKS * scale)
    return {
        "burst_two_phase": await burst(tasks, TASK_S, queue_depth=3_600, admission_timeout=0.3),
        "burst_no_queue": await burst(tasks, TASK_S, queue_depth=0, admission_timeout=0.3),
        "targets": {"burst_two_phase.rejected": 0, "burst_two_phase.drain_over_ideal": "<= 1.15"},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the 3,704 tasks (default 1)")
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(args.scale)), indent=2))
