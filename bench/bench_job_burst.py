"""A burst of jobs, trial after trial: does any stay pending while nothing runs (a lost wake-up)?

`WorkerPool(spawn=2, store=URL)`, 200 warm-up jobs, then per trial 1,000
no-op jobs submitted by 256 concurrent producers that do not await them,
the store's counts sampled every 20 ms. Per trial: the drain time (first
submit to nothing pending or running) and the longest stretch with jobs
pending and none running (a stall: the scheduler waiting for its tick with
work in the store and workers free). Prints one JSON object::

    python -m bench.bench_job_burst --trials 50                       # SQLite in a temporary directory
    python -m bench.bench_job_burst --trials 50 --store postgresql://...
    python -m bench.bench_job_burst --trials 50 --postgres auto        # a throwaway PostgreSQL server
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import tempfile
import time

import uvloop

import pool
from bench.support import routines
from bench.support.workloads import log


async def burst_trial(
    p: pool.WorkerPool, jobs: int = 1000, producers: int = 256, sample_s: float = 0.02, timeout: float = 60.0
) -> dict[str, float]:
    """One burst on an open pool with a store; its drain time and longest stall, in seconds."""
    samples: list[tuple[float, int, int]] = []
    submitted = asyncio.Event()

    async def sample() -> None:
        while True:
            counts = await p.jobs.counts()
            pending, running = counts.get("pending", 0), counts.get("running", 0)
            samples.append((time.perf_counter(), pending, running))
            if submitted.is_set() and not pending and not running:
                return
            await asyncio.sleep(sample_s)

    async def produce(count: int) -> None:
        for _ in range(count):
            await routines.noop.submit()

    t0 = time.perf_counter()
    sampler = asyncio.create_task(sample())
    try:
        share, extra = divmod(jobs, producers)
        await asyncio.gather(*(produce(share + (i < extra)) for i in range(producers)))
        submitted.set()
        async with asyncio.timeout(timeout):
            await sampler
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
    return {"drain_s": round(samples[-1][0] - t0, 4), "longest_stall_s": round(longest_stall(samples), 4)}


def longest_stall(samples: list[tuple[float, int, int]]) -> float:
    """The longest stretch of samples with jobs pending and none running."""
    longest, since = 0.0, None
    for at, pending, running in samples:
        if pending and not running:
            since = at if since is None else since
            longest = max(longest, at - since)
        else:
            if since is not None:
                longest = max(longest, at - since)
            since = None
    return longest


async def trials(url: str, count: int, jobs: int) -> dict[str, object]:
    async with pool.WorkerPool(spawn=2, store=url) as p:
        await asyncio.gather(*[(await routines.noop.submit()).result(timeout=60) for _ in range(200)])  # warm-up
        results = []
        for number in range(count):
            results.append(await burst_trial(p, jobs))
            log(f"trial {number + 1}/{count}: {results[-1]}")
    stalls = [r["longest_stall_s"] for r in results]
    drains = [r["drain_s"] for r in results]
    return {
        "trials": count,
        "jobs_per_trial": jobs,
        "drain_s": {"p50": statistics.median(drains), "max": max(drains)},
        "longest_stall_s": {"p50": statistics.median(stalls), "max": max(stalls)},
        "trials_with_a_stall_of_0_5_s_or_more": sum(1 for s in stalls if s >= 0.5),
        "each": results,
    }


async def main(args: argparse.Namespace, url: str | None) -> None:
    out: dict[str, object] = {"workload": "job_burst"}
    with tempfile.TemporaryDirectory(prefix="leakypool-burst-") as directory:
        out["sqlite"] = await trials(f"sqlite:///{directory}/jobs.db", args.trials, args.jobs)
    if url:
        out["postgresql"] = await trials(url, args.trials, args.jobs)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--store", help="a PostgreSQL URL to run the trials on too")
    parser.add_argument("--postgres", choices=["auto"], help="start a throwaway PostgreSQL server for the trials")
    args = parser.parse_args()
    if args.postgres == "auto":
        from tests import pg

        with pg.server() as server:
            server.psql(f"CREATE DATABASE burst OWNER {pg.USER}")
            uvloop.run(main(args, server.url("burst")))
    else:
        uvloop.run(main(args, args.store))
