"""Workload (k): a no-op call behind N-1 full workers, against the same call with every worker free.

PriorityLoadBalancer, TaskCountBackpressure(1), spawn=N: the first N-1
workers each hold a long call, so every new call belongs on the last one.
A pool that offered each call to every full worker first would pay one
Call/Reject round trip per full worker; one that knows who is full
(``context.known_full``) goes straight to the worker with room. Reports, per
N, p50/p99 of both, their ratio, the dispatching process's CPU per call
(all its threads) and the Reject frames read per call; then the same with
16 workers reached over TCP (gRPC). Prints one JSON object::

    python -m bench.bench_capacity                  # N = 2, 8, 32, 128, then 16 over TCP
    python -m bench.bench_capacity --sizes 2 8 --calls 500
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from typing import TypedDict

import uvloop

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from bench.support import routines
from bench.support.workloads import log, summarize_us
from pool._transport._session import Session

_rejects = [0]


class SizeRun(TypedDict):
    """One N's row of the report: what `main` compares across sizes (ratios and CPU per call)."""

    workers: int
    transport: str
    started_s: float
    all_free: dict[str, float]
    behind_full: dict[str, float]
    p50_ratio: float
    cpu_us_per_call_all_free: float
    cpu_us_per_call_behind_full: float
    rejects_per_call_all_free: float
    rejects_per_call_behind_full: float


def _count_rejects() -> None:
    """Count the Reject frames this process reads (every frame a worker sends passes `Session.feed`)."""
    feed = Session.feed

    def counting(self, message):
        _rejects[0] += sum(1 for frame in message.frames if frame.HasField("reject"))
        return feed(self, message)

    Session.feed = counting  # type: ignore[method-assign]


async def timed(calls: int) -> tuple[list[float], float, int]:
    samples = []
    rejects0, cpu0 = _rejects[0], time.process_time()
    for _ in range(calls):
        t0 = time.perf_counter()
        await routines.noop()
        samples.append(time.perf_counter() - t0)
    return samples, time.process_time() - cpu0, _rejects[0] - rejects0


async def one_size(n: int, calls: int, transport: str) -> SizeRun:
    t0 = time.perf_counter()
    async with pool.WorkerPool(
        spawn=n,
        backpressure=TaskCountBackpressure(1),
        loadbalancer=PriorityLoadBalancer(),
        queue_depth=10_000,
        local_transport=transport,
        startup_timeout=300,
        shutdown_grace=1,
    ) as p:
        await p.wait_for_workers(n, timeout=300)
        started = time.perf_counter() - t0
        await timed(min(calls, 200))  # warm-up: every worker has the routine's code
        free, free_cpu, free_rejects = await timed(calls)
        holds = [asyncio.create_task(routines.sleeper(3600)) for _ in range(n - 1)]
        async with asyncio.timeout(120):
            while p.stats().running < n - 1:  # the holds reach their workers
                await asyncio.sleep(0.01)
        try:
            await timed(min(calls, 200))
            behind, behind_cpu, behind_rejects = await timed(calls)
        finally:
            for hold in holds:
                hold.cancel()
            await asyncio.gather(*holds, return_exceptions=True)
    free_s, behind_s = summarize_us(free), summarize_us(behind)
    return {
        "workers": n,
        "transport": transport,
        "started_s": round(started, 2),
        "all_free": free_s,
        "behind_full": behind_s,
        "p50_ratio": round(behind_s["p50_us"] / free_s["p50_us"], 3),
        "cpu_us_per_call_all_free": round(free_cpu / calls * 1e6, 1),
        "cpu_us_per_call_behind_full": round(behind_cpu / calls * 1e6, 1),
        "rejects_per_call_all_free": round(free_rejects / calls, 3),
        "rejects_per_call_behind_full": round(behind_rejects / calls, 3),
    }


async def main(args: argparse.Namespace) -> None:
    _count_rejects()
    runs: list[SizeRun] = []
    for n in args.sizes:
        log(f"(k) N={n} over unix sockets")
        runs.append(await one_size(n, args.calls, "unix"))
    if args.tcp:
        log(f"(k) N={args.tcp} over TCP (gRPC)")
        runs.append(await one_size(args.tcp, args.calls, "tcp"))
    local = [r for r in runs if r["transport"] == "unix"]
    cpu = [r["cpu_us_per_call_behind_full"] for r in local]
    print(
        json.dumps(
            {
                "workload": "k_behind_full_workers",
                "python": platform.python_version(),
                "runs": runs,
                "worst_p50_ratio": max(r["p50_ratio"] for r in runs),
                "cpu_per_call_spread": round(max(cpu) / min(cpu), 3) if cpu else None,
                "targets": {"p50_ratio": "<= 1.3 at every N", "cpu_per_call_spread": "<= 1.5 from N = 2 to 128"},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32, 128])
    parser.add_argument("--calls", type=int, default=2000, help="calls measured per case (default 2000)")
    parser.add_argument("--tcp", type=int, default=16, help="workers for the TCP case; 0 skips it (default 16)")
    uvloop.run(main(parser.parse_args()))
