"""The jobs chaos soak's end: drain the backlog, then count from the store and the job log (see bench/soak/jobs.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import defaultdict
from typing import Any

DRAIN_LIMIT_S = 240.0
LEASE_TTL_S = 3.0  # the soak's processes' lease_ttl: a kill explains a second run this long after


async def drain(url: str, acked: dict[str, float]) -> float | None:
    """Wait until every acknowledged job is final; seconds it took (None: not within `DRAIN_LIMIT_S`)."""
    import asyncpg

    t0 = time.monotonic()
    while time.monotonic() - t0 < DRAIN_LIMIT_S:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            db = await asyncpg.connect(url)
            try:
                open_ids = {
                    r["id"]
                    for r in await db.fetch("SELECT id FROM leakypool_jobs WHERE state IN ('pending', 'running')")
                }
            finally:
                await db.close()
            if not open_ids & acked.keys():
                return round(time.monotonic() - t0, 1)
        await asyncio.sleep(1.0)
    return None


async def report(
    url: str,
    log: str,
    acked: dict[str, float],
    nacked: list[str],
    chaos: dict[str, int],
    events: list[tuple[float, float]],
    requeued: list[float],
    drained_in: float | None,
    duration: float,
    run: dict[str, Any],
) -> dict[str, Any]:
    import asyncpg

    from bench.soak.failover import due_stretches, failover_times, ran_after_outcome, stretch_report

    db = await asyncpg.connect(url)
    try:
        rows = {r["id"]: r for r in await db.fetch("SELECT id, state, attempts, created_at FROM leakypool_jobs")}
        outcomes: dict[str, list[float]] = defaultdict(list)
        for r in await db.fetch("SELECT id, at FROM soak_outcomes"):
            outcomes[r["id"]].append(r["at"])
    finally:
        await db.close()
    starts, pids, ends = read_log(log)
    states: dict[str, int] = defaultdict(int)
    for job_id in acked:
        states[rows[job_id]["state"] if job_id in rows else "missing"] += 1
    twice = [j for j in acked if len(starts.get(j, ())) > 1]
    unexplained = [j for j in twice if not chaos_between(events, min(starts[j]), max(starts[j]))]
    after_expiry = [j for j in unexplained if any(min(starts[j]) <= t <= max(starts[j]) for t in requeued)]
    first_start = {j: min(s) for j, s in starts.items()}
    stretches = due_stretches(acked, first_start, [t for s in starts.values() for t in s])
    rerun = ran_after_outcome({j: min(at) for j, at in outcomes.items()}, starts)
    failed_over = failover_times(run["failovers"], list(acked.values()))
    past_due = sorted(min(starts[j]) - rows[j]["created_at"] for j in acked if j in rows and starts.get(j))
    return {
        "duration_s": duration,
        "submitted": len(acked),
        "submit_errors": len(nacked),
        "unacknowledged_in_store": len(set(rows) - acked.keys()),
        "succeeded": states["succeeded"],
        "failed": states["failed"],
        "lost": len(acked) - states["succeeded"] - states["failed"],
        "run_twice": sum(1 for j in acked if len(starts.get(j, ())) > 1),
        "completed_twice": sum(1 for j in acked if ends.get(j, 0) > 1),
        "ran_after_its_outcome_committed": len(rerun),
        "outcome_committed_twice": sum(1 for at in outcomes.values() if len(at) > 1),
        "reruns": [rerun_detail(j, starts[j], pids[j], min(outcomes[j]), events, requeued) for j in rerun[:5]],
        "run_twice_without_chaos": len(unexplained),
        "run_twice_after_a_lease_expired_unkilled": len(after_expiry),
        "suspects": [suspect(j, starts[j], pids[j], requeued) for j in unexplained[:5]],
        "lease_requeues": len(requeued),
        "max_past_due_s": round(past_due[-1], 3) if past_due else None,
        "p99_past_due_s": round(past_due[int(0.99 * (len(past_due) - 1))], 3) if past_due else None,
        "drained_in_s": drained_in,
        **{k: chaos.get(k, 0) for k in ("dispatcher_kills", "worker_kills", "postgres_restarts", "failovers")},
        "failover_s": failed_over,
        "max_failover_s": max((f for f in failed_over if f is not None), default=None),
        "promote_s": [round(f["promoted"] - f["killed"], 3) for f in run["failovers"]],
        "rebuild_s": [round(f["rebuilt"] - f["promoted"], 3) for f in run["failovers"]],
        **stretch_report(stretches, run["failovers"], run["t0"]),
        "dispatcher_rss": run["rss"],
        "slow_promotions_log": [f["log"] for f in run["failovers"] if f["log"]][:3],
        "cpu_s": round(sum(os.times()[:4]), 1),
    }


def read_log(log: str) -> tuple[dict[str, list[float]], dict[str, list[str]], dict[str, int]]:
    """The job log: per job, its starts' times, their pids, and how many runs ended."""
    starts: dict[str, list[float]] = defaultdict(list)
    pids: dict[str, list[str]] = defaultdict(list)
    ends: dict[str, int] = defaultdict(int)
    with contextlib.suppress(FileNotFoundError), open(log) as f:
        for line in f:
            kind, job_id, at, pid = line.split()
            if kind == "S":
                starts[job_id].append(float(at))
                pids[job_id].append(pid)
            else:
                ends[job_id] += 1
    return starts, pids, ends


def suspect(
    job_id: str, starts: list[float], pids: list[str], requeued: list[float], since: float | None = None
) -> dict[str, Any]:
    """A job run twice with no kill or outage near: its starts and the lease re-queues around them.

    Times are seconds from ``since`` (default: its first start)."""
    first = min(starts) if since is None else since
    return {
        "job": job_id,
        "pids": pids,
        "starts_s": [round(t - first, 3) for t in starts],
        "requeues_near_s": [round(t - first, 3) for t in requeued if abs(t - first) < 10],
    }


def rerun_detail(
    job_id: str,
    starts: list[float],
    pids: list[str],
    outcome: float,
    events: list[tuple[float, float]],
    requeued: list[float],
) -> dict[str, Any]:
    """A job started again after its outcome committed: as a `suspect`, from the outcome, and the chaos around it."""
    near = [[round(a - outcome, 3), round(b - outcome, 3)] for a, b in events if abs(a - outcome) < 10]
    return {**suspect(job_id, starts, pids, requeued, since=outcome), "chaos_near_s": near}


def chaos_between(events: list[tuple[float, float]], first: float, last: float) -> bool:
    """Whether a kill or an outage happened while a job's first attempt could still have been running."""
    return any(start <= last and end >= first - LEASE_TTL_S for start, end in events)
