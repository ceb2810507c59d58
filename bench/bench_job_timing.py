"""(n): how close to its due time a job starts, and periodic slots across processes, beside in-memory calls.

    delayed   K jobs with run_at spread over 2 s on 2 idle workers: start minus due, p50/p99 ms;
              in memory: K calls each made after asyncio.sleep until its due time (same pool, same run)
    periodic  3 processes schedule one per-second cron on the store for D s: slots, slot jobs run
              more than once (target 0), slots skipped between the first and last (target 0),
              start minus slot p50/p99 ms; in memory: one loop sleeping to each second, then calling

Prints one JSON object. Run from the repository root::

    python -m bench.bench_job_timing [--jobs 200] [--seconds 20] [--postgres auto|URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

import uvloop

import pool
from bench.support import routines
from bench.support.workloads import WORKERS, log, summarize_us


def _ms(samples: list[float]) -> dict[str, float]:
    s = summarize_us(samples)
    return {
        "p50_ms": round(s["p50_us"] / 1e3, 2),
        "p99_ms": round(s["p99_us"] / 1e3, 2),
        "max_ms": round(max(samples) * 1e3, 2),
    }


async def delayed(store: str, n: int) -> dict[str, object]:
    async with pool.WorkerPool(spawn=WORKERS, store=store) as p:
        for _ in range(20):
            await (await routines.stamp.submit()).result(timeout=60)
        t0 = time.time() + 1.0
        dues = [t0 + 2.0 * i / n for i in range(n)]
        jobs = await asyncio.gather(
            *(routines.stamp.options(run_at=datetime.datetime.fromtimestamp(d, datetime.UTC)).submit() for d in dues)
        )
        late_submits = sum(1 for job, due in zip(jobs, dues, strict=False) if job.created_at.timestamp() > due)
        late = [await job.result(timeout=120) - due for job, due in zip(jobs, dues, strict=False)]

        async def call_at(due: float) -> float:
            await asyncio.sleep(max(0.0, due - time.time()))
            return await routines.stamp() - due

        t0 = time.time() + 0.5
        in_memory = await asyncio.gather(*(call_at(t0 + 2.0 * i / n) for i in range(n)))
        counts = await p.jobs.counts()
    return {
        "jobs": n,
        "job_start_minus_due": _ms(late),
        "call_start_minus_due": _ms(list(in_memory)),
        "early": sum(1 for x in late if x < 0),
        "submitted_after_due": late_submits,
        "store_counts": counts,
    }


async def periodic(store: str, seconds: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="leakypool-cron-") as markers:
        args = [sys.executable, "-m", "tests.integration.support.cron_replica", store, markers, "* * * * * */1"]
        children = [subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(3)]
        try:
            names = {c.stdout.readline().decode().split()[1] for c in children}  # type: ignore[union-attr]
            await asyncio.sleep(seconds)  # the measured period: the replicas run their schedules meanwhile
            for child in children:
                child.stdin.write(b"stop\n")  # type: ignore[union-attr]
                child.stdin.close()  # type: ignore[union-attr]
            for child in children:
                child.wait(60)
        finally:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.wait()
        with open(os.path.join(markers, "tick")) as f:
            executions = f.read().count("start")
    (name,) = names
    async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=store) as p:
        slot_jobs = [j for j in await p.jobs.list(limit=100_000) if j.id.startswith(name)]
    slots = sorted(int(j.id.rsplit("@", 1)[1]) for j in slot_jobs)
    done = [j for j in slot_jobs if j.state == "succeeded"]
    late = [j.started_at.timestamp() - j.run_at.timestamp() for j in done]  # type: ignore[union-attr]

    in_memory = []
    async with pool.WorkerPool(spawn=WORKERS):
        for _ in range(min(seconds, 10)):
            slot = float(int(time.time()) + 1)
            await asyncio.sleep(slot - time.time())
            in_memory.append(await routines.stamp() - slot)
    return {
        "processes": 3,
        "seconds": seconds,
        "slots": len(slots),
        "succeeded": len(done),
        "executions": executions,
        "ran_more_than_once": executions - len(done) + sum(j.attempts - 1 for j in done),
        "skipped_between_first_and_last": (slots[-1] - slots[0] + 1 - len(slots)) if slots else None,
        "job_start_minus_slot": _ms(late) if late else None,
        "call_start_minus_slot": _ms(in_memory),
    }


async def main(n: int, seconds: int, postgres: str | None) -> dict[str, object]:
    result: dict[str, object] = {"runtime": "leakypool job timing"}
    with tempfile.TemporaryDirectory(prefix="leakypool-bench-") as directory:
        stores = {"sqlite": f"sqlite:///{directory}/n.db"}
        if postgres:
            stores["postgres"] = postgres
        for kind, url in stores.items():
            log(f"(n) delayed jobs, {kind}")
            result[f"n_delayed_{kind}"] = await delayed(url + ("_d" if kind == "postgres" else ""), n)
            log(f"(n) periodic, 3 processes, {kind}")
            result[f"n_periodic_{kind}"] = await periodic(url + ("_p" if kind == "postgres" else ""), seconds)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="delayed jobs (default 200)")
    parser.add_argument("--seconds", type=int, default=20, help="periodic run length (default 20)")
    parser.add_argument(
        "--postgres",
        help="also on PostgreSQL: 'auto' (a throwaway server) or a URL prefix: "
        "databases PREFIX_d and PREFIX_p must exist",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        postgres = args.postgres
        if postgres == "auto":
            from tests import pg

            server = stack.enter_context(pg.server())
            for suffix in ("d", "p"):
                server.psql(f"CREATE DATABASE bench_{suffix} OWNER {pg.USER}")
            postgres = server.url("bench")
        print(json.dumps(uvloop.run(main(args.jobs, args.seconds, postgres)), indent=2))
