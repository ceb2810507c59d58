"""Durable jobs on docs/performance.md's workloads (g)-(j), beside in-memory calls in the same run.

    (g) 10,000 no-op jobs submitted 256 at a time, submit to result: jobs/s
        (and (b), the same as in-memory calls, for the ratio; target >= 1/2)
    (h) one no-op job at a time, submit to result, 1,000 jobs: p50/p99 ms (target p50 < 3 ms)
    (i) seed 000's burst as jobs: 3,704 jobs of sleep(2.29) on 2 workers x 100:
        drain time vs the ideal 42.41 s, rejected count (target <= 1.10x, 0 rejected)
    (j) the dispatching process's RSS with 100,000 pending jobs vs 100 (target < 50 MiB more)
    (m) with ``--prefill N``: (g) and (h) again on a store holding N finished jobs (bulk inserted),
        beside the empty store's figures of the same run (target: within 0.9x)

Prints one JSON object. Run from the repository root::

    python -m bench.bench_jobs [--quick] [--only g,h,i,j] [--postgres auto|URL] [--prefill 1000000]

With ``--postgres``, (g) and (h) also run on PostgreSQL (``auto`` starts a
throwaway server as the tests do; it needs PostgreSQL installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import tempfile
import time
from typing import TypedDict

import uvloop

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from bench.support import routines
from bench.support.prefill import prefill
from bench.support.workloads import TP_CALLS, TP_CONCURRENCY, WORKERS, concurrent, log, sequential, summarize_us


class Throughput(TypedDict):
    """(g)'s row: calls/s and jobs/s medians that `history` compares store against store."""

    n: int
    concurrency: int
    rounds: int
    calls_per_s_median: float
    jobs_per_s_median: float
    jobs_over_calls_median: float
    jobs_over_calls_range: list[float]
    errors: list[dict[str, dict[str, int]]]
    store_counts: dict[str, int]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def job_roundtrip() -> None:
    job = await routines.noop.submit()
    await job.result(timeout=600)


async def throughput(store: str, total: int, rounds: int = 3) -> Throughput:
    """Calls and jobs in alternating rounds on one pool (the machine drifts: ratios per round compare)."""
    calls: list[float] = []
    jobs: list[float] = []
    errors: list[dict[str, dict[str, int]]] = []
    async with pool.WorkerPool(spawn=WORKERS, store=store) as p:
        await concurrent(routines.noop, 500, TP_CONCURRENCY)  # warm the workers
        await concurrent(job_roundtrip, 500, TP_CONCURRENCY)
        for _ in range(rounds):
            elapsed, call_errors = await concurrent(routines.noop, total, TP_CONCURRENCY)
            calls.append(total / elapsed)
            elapsed, job_errors = await concurrent(job_roundtrip, total, TP_CONCURRENCY)
            jobs.append(total / elapsed)
            errors.append({"calls": call_errors, "jobs": job_errors})
        counts = await p.jobs.counts()
    ratios = sorted(j / c for j, c in zip(jobs, calls, strict=False))
    return {
        "n": total,
        "concurrency": TP_CONCURRENCY,
        "rounds": rounds,
        "calls_per_s_median": round(sorted(calls)[rounds // 2], 1),
        "jobs_per_s_median": round(sorted(jobs)[rounds // 2], 1),
        "jobs_over_calls_median": round(ratios[rounds // 2], 3),
        "jobs_over_calls_range": [round(ratios[0], 3), round(ratios[-1], 3)],
        "errors": errors,
        "store_counts": counts,
    }


async def job_samples(n: int) -> list[float]:
    """Submit-to-result of ``n`` jobs one at a time (after a warm-up of 50), in seconds; inside a pool."""
    await sequential(job_roundtrip, 50)
    return await sequential(job_roundtrip, n)


async def latency(store: str, n: int) -> dict[str, object]:
    async with pool.WorkerPool(spawn=WORKERS, store=store):
        samples = await job_samples(n)
        calls = await sequential(routines.noop, n)
    jobs, mem = summarize_us(samples), summarize_us(calls)
    return {
        "n": n,
        "job_p50_ms": round(jobs["p50_us"] / 1e3, 3),
        "job_p99_ms": round(jobs["p99_us"] / 1e3, 3),
        "job_max_ms": round(max(samples) * 1e3, 3),
        "call_p50_ms": round(mem["p50_us"] / 1e3, 3),
        "call_p99_ms": round(mem["p99_us"] / 1e3, 3),
        "call_max_ms": round(max(calls) * 1e3, 3),
    }


async def burst(directory: str, tasks: int, task_s: float) -> dict[str, object]:
    per_worker = 100
    ideal = tasks / (per_worker * WORKERS) * task_s
    async with pool.WorkerPool(
        spawn=WORKERS,
        backpressure=TaskCountBackpressure(per_worker),
        loadbalancer=PriorityLoadBalancer(),
        store=f"sqlite:///{directory}/i.db",
        dispatch_deadline=3600,
    ):
        await routines.noop()
        t0 = time.perf_counter()
        rejected = 0
        submitted = []
        for outcome in await asyncio.gather(
            *(routines.sleeper.submit(task_s) for _ in range(tasks)), return_exceptions=True
        ):
            if isinstance(outcome, pool.AdmissionRejected):
                rejected += 1
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                submitted.append(outcome)
        failed = 0
        for job in submitted:
            try:
                await job.result(timeout=3600)
            except Exception:  # noqa: BLE001 - any failure is counted, not raised: the figure this bench reports
                failed += 1
        drain = time.perf_counter() - t0
    return {
        "jobs": tasks,
        "task_s": task_s,
        "rejected": rejected,
        "failed": failed,
        "drain_s": round(drain, 2),
        "ideal_s": round(ideal, 2),
        "drain_over_ideal": round(drain / ideal, 3),
    }


async def backlog_memory(directory: str, big: int) -> dict[str, object]:
    """RSS of a pool whose store holds ``big`` pending jobs no worker can take, vs 100."""
    result: dict[str, object] = {}
    rss: dict[int, float] = {}
    for count in (100, big):
        discovery = pool.StaticDiscovery()  # no workers: every job stays pending
        async with pool.WorkerPool(
            spawn=0, discovery=discovery, store=f"sqlite:///{directory}/j{count}.db", dispatch_deadline=3600
        ) as p:
            for start in range(0, count, 1000):
                await asyncio.gather(*(routines.noop.submit() for _ in range(start, min(count, start + 1000))))
            await asyncio.sleep(1.0)  # the scheduler leases its batch
            counts = await p.jobs.counts()
            rss[count] = round(rss_mib(), 1)
            result[f"rss_mib_{count}_pending"] = rss[count]
            result[f"pending_{count}"] = counts["pending"]
    result["rss_mib_more"] = round(rss[big] - rss[100], 1)
    return result


async def history(store: str, prefill_n: int, quick: bool, rounds: int = 3) -> dict[str, object]:
    """(m): (g) and (h) on an empty store and on one holding ``prefill_n`` finished jobs, alternating round by round
    (a shared machine's load drifts: each round compares the two within minutes)."""
    scale = 10 if quick else 1
    pg = store.startswith("postgres")
    stores = {"empty": store + ("_empty" if pg else "_empty.db"), "full": store + ("_full" if pg else "_full.db")}
    await prefill(stores["empty"], 0)
    log(f"(m) pre-filling {prefill_n} finished jobs")
    filled_s = await prefill(stores["full"], prefill_n)
    g: dict[str, list[Throughput]] = {"empty": [], "full": []}
    h: dict[str, list[float]] = {"empty": [], "full": []}
    for _ in range(rounds):
        for kind in ("empty", "full"):
            g[kind].append(await throughput(stores[kind], TP_CALLS // scale, rounds=1))
            h[kind].extend(await latency_samples(stores[kind], 1000 // scale // rounds))
    jobs = {kind: [r["jobs_per_s_median"] for r in g[kind]] for kind in g}
    calls = {kind: [r["calls_per_s_median"] for r in g[kind]] for kind in g}
    ratios = sorted(f / e for f, e in zip(jobs["full"], jobs["empty"], strict=False))
    vs_calls = sorted(
        (f / fc) / (e / ec)
        for f, fc, e, ec in zip(jobs["full"], calls["full"], jobs["empty"], calls["empty"], strict=False)
    )
    latency_ms = {kind: summarize_us(h[kind]) for kind in h}
    return {
        "finished_jobs": prefill_n,
        "prefill_s": round(filled_s, 1),
        "rounds": rounds,
        "g_jobs_per_s": jobs,
        "g_calls_per_s_same_rounds": calls,
        "g_full_over_empty_median": round(ratios[rounds // 2], 3),
        "g_full_over_empty_range": [round(ratios[0], 3), round(ratios[-1], 3)],
        "g_full_over_empty_vs_calls_median": round(vs_calls[rounds // 2], 3),
        "h_n_per_store": len(h["empty"]),
        "h_job_p50_ms": {k: round(v["p50_us"] / 1e3, 3) for k, v in latency_ms.items()},
        "h_job_p99_ms": {k: round(v["p99_us"] / 1e3, 3) for k, v in latency_ms.items()},
        "h_p50_empty_over_full": round(latency_ms["empty"]["p50_us"] / latency_ms["full"]["p50_us"], 3),
    }


async def latency_samples(store: str, n: int) -> list[float]:
    """`job_samples` in a pool of its own on ``store``."""
    async with pool.WorkerPool(spawn=WORKERS, store=store):
        return await job_samples(n)


async def main(quick: bool, only: set[str], postgres: str | None, prefill_n: int = 0) -> dict[str, object]:
    scale = 10 if quick else 1
    result: dict[str, object] = {"runtime": "leakypool jobs", "quick": quick}
    with tempfile.TemporaryDirectory(prefix="leakypool-bench-") as directory:
        if prefill_n:
            log("(m) (g), (h) beside a history of finished jobs, SQLite")
            result["m_history_sqlite"] = await history(f"sqlite:///{directory}/m", prefill_n, quick)
            if postgres:
                log("(m) (g), (h) beside a history of finished jobs, PostgreSQL")
                result["m_history_postgres"] = await history(postgres + "_m", prefill_n, quick)
        if "g" in only:
            log("(g) job throughput, SQLite")
            result["g_job_throughput"] = await throughput(f"sqlite:///{directory}/g.db", TP_CALLS // scale)
            if postgres:
                log("(g) job throughput, PostgreSQL")
                result["g_job_throughput_postgres"] = await throughput(postgres + "_g", TP_CALLS // scale)
        if "h" in only:
            log("(h) sequential job latency, SQLite")
            result["h_job_latency"] = await latency(f"sqlite:///{directory}/h.db", 1000 // scale)
            if postgres:
                log("(h) sequential job latency, PostgreSQL")
                result["h_job_latency_postgres"] = await latency(postgres + "_h", 1000 // scale)
        if "i" in only:
            log("(i) seed-000 burst as jobs")
            result["i_burst_jobs"] = await burst(directory, 3704 // scale, 2.29)
        if "j" in only:
            log("(j) backlog memory")
            result["j_backlog_memory"] = await backlog_memory(directory, 100_000 // scale)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 sizes")
    parser.add_argument("--only", default="g,h,i,j", help="comma-separated workloads (default g,h,i,j)")
    parser.add_argument(
        "--postgres",
        help="also run (g), (h) on PostgreSQL: 'auto' (a throwaway server) or a URL "
        "prefix: databases PREFIX_g and PREFIX_h (and PREFIX_m_empty, PREFIX_m_full) must exist",
    )
    parser.add_argument("--prefill", type=int, default=0, help="(m): also run (g), (h) beside N finished jobs")
    args = parser.parse_args()
    only = set(args.only.split(",")) - {""}
    if args.postgres == "auto":
        from tests import pg

        with pg.server() as server:
            for suffix in ("g", "h", "m_empty", "m_full"):
                server.psql(f"CREATE DATABASE bench_{suffix} OWNER {pg.USER}")
            print(json.dumps(uvloop.run(main(args.quick, only, server.url("bench"), args.prefill)), indent=2))
    else:
        print(json.dumps(uvloop.run(main(args.quick, only, args.postgres, args.prefill)), indent=2))
