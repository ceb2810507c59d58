"""Two dispatching processes on one store beside one: aggregate job throughput (workload (g) split).

    python -m bench.bench_replicas [--quick] [--rounds 3] [--postgres auto|URL]

Per round and per store: one process with ``spawn=2`` runs N jobs (256 in
flight), then two processes with ``spawn=1`` each run N/2 at once on the
same store (the same two workers in all). Prints one JSON object: jobs/s
of each, and the median of the per-round ratios two / one. With
``--postgres``, PostgreSQL too (``auto`` starts a throwaway server).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time

import uvloop

import pool
from bench.support import routines
from bench.support.workloads import TP_CALLS, TP_CONCURRENCY, concurrent, log


async def job_roundtrip() -> None:
    job = await routines.noop.submit()
    await job.result(timeout=600)


async def child(url: str, jobs: int, spawn: int) -> None:
    """One dispatching process: warm up, say READY, run ``jobs`` on "go", print the seconds it took."""
    async with pool.WorkerPool(spawn=spawn, store=url):
        await concurrent(job_roundtrip, 200, TP_CONCURRENCY)
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        elapsed, errors = await concurrent(job_roundtrip, jobs, TP_CONCURRENCY)
        print(json.dumps({"elapsed": elapsed, "errors": errors}), flush=True)


async def run(url: str, processes: int, total: int) -> float:
    """Jobs/s of ``processes`` processes sharing ``total`` jobs and two workers, started together."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.bench_replicas",
            "--child",
            url,
            str(total // processes),
            str(2 // processes),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    try:
        for c in children:
            assert (await asyncio.wait_for(c.stdout.readline(), 120)).startswith(b"READY")  # type: ignore[union-attr]
        t0 = time.perf_counter()
        for c in children:
            c.stdin.write(b"go\n")  # type: ignore[union-attr]
        results = [json.loads(await asyncio.wait_for(c.stdout.readline(), 600)) for c in children]  # type: ignore[union-attr]
        elapsed = time.perf_counter() - t0
        if any(r["errors"] for r in results):
            raise RuntimeError(f"errors: {results}")
        for c in children:
            await asyncio.wait_for(c.wait(), 60)
    finally:
        for c in children:
            if c.returncode is None:
                c.kill()
                await c.wait()
    return total / elapsed


async def main(stores: dict[str, str], total: int, rounds: int) -> dict[str, object]:
    result: dict[str, object] = {"runtime": "leakypool jobs, processes on one store", "jobs": total, "rounds": rounds}
    for name, url in stores.items():
        one, two = [], []
        for r in range(rounds):
            log(f"{name} round {r + 1}: one process, then two")
            one.append(await run(f"{url}{r}" if name == "postgres" else f"{url}/{r}.db", 1, total))
            two.append(await run(f"{url}{r}b" if name == "postgres" else f"{url}/{r}b.db", 2, total))
        result[name] = {
            "one_process_jobs_per_s_median": round(statistics.median(one), 1),
            "two_processes_jobs_per_s_median": round(statistics.median(two), 1),
            "two_over_one_median": round(statistics.median(t / o for t, o in zip(two, one, strict=False)), 3),
        }
    return result


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        uvloop.run(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        sys.exit(0)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 sizes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--postgres",
        help="also PostgreSQL: 'auto' (a throwaway server) or a URL prefix "
        "(databases PREFIX0, PREFIX0b, PREFIX1, ... must exist)",
    )
    args = parser.parse_args()
    total = TP_CALLS // (10 if args.quick else 1)
    with tempfile.TemporaryDirectory(prefix="leakypool-bench-") as directory:
        stores = {"sqlite": f"sqlite:///{directory}"}
        if args.postgres == "auto":
            from tests import pg

            with pg.server() as server:
                for r in range(args.rounds):
                    for suffix in ("", "b"):
                        server.psql(f"CREATE DATABASE bench_{r}{suffix} OWNER {pg.USER}")
                stores["postgres"] = server.url("bench_")
                print(json.dumps(uvloop.run(main(stores, total, args.rounds)), indent=2))
        else:
            if args.postgres:
                stores["postgres"] = args.postgres
            print(json.dumps(uvloop.run(main(stores, total, args.rounds)), indent=2))
