"""Chaos soak for durable jobs across processes: nothing acknowledged is lost.

    python -m bench.soak.jobs [--duration 600] [--dispatchers 3] [--rate 10] [--postgres auto|URL] [--seed N]
                              [--pg-restart-every 90 | --failover-every S] [--keep N]

Three dispatching processes (each a ``bench.soak.dispatcher`` child with a
``WorkerPool(spawn=2, store=PG)``) share one PostgreSQL store and submit jobs
continuously (``retries=20``; each job sleeps 20-300 ms and logs its start
and end in a shared file). Meanwhile, at random: a dispatching process is
SIGKILLed (its workers go with it, its jobs are re-queued by the others once
its lease expires) and restarted a moment later, or one of their workers is
SIGKILLed (its attempt fails and is retried); and every ``--pg-restart-every`` seconds (default 90; 0: once,
half-way) PostgreSQL itself is stopped, alternately ``fast`` (a clean
shutdown that ends every session) and ``immediate`` (as a crash), and started
again ``PG_DOWN_S`` later: submits ride over it (``store_retry``, 10 s by
default). When the time is up, submitting stops and the backlog drains.

``--failover-every S`` replaces the restarts by failovers (issue 35): the
soak starts a primary and a synchronous streaming standby (bench/soak/failover.py
on tests/pg.py: ``initdb``, ``pg_basebackup -R``, ``synchronous_standby_names``,
both on loopback), the dispatching processes use the two-host URL
``postgresql://...@127.0.0.1:P1,127.0.0.1:P2/soak?target_session_attrs=read-write``,
and every S seconds the current primary's postmaster is SIGKILLed, the
standby promoted (``pg_ctl promote``), and the dead primary rebuilt as the
new standby (its data directory wiped, ``pg_basebackup -R`` from the new
primary; asynchronous while it copies, synchronous again once it streams) so
the next failover can come. ``--keep N`` (default 1 in this mode, else 0):
the first N dispatching processes are never SIGKILLed (their workers are),
so their RSS at the end compares with their RSS at the start.

It prints JSON:

- ``submitted``: jobs whose ``submit`` returned (acknowledged: committed);
  ``submit_errors``: submits that raised (the store down): not acknowledged;
- ``succeeded``, ``failed``; ``lost``: acknowledged jobs not ``succeeded``
  or ``failed`` once drained, or missing from the store (must be 0);
- ``run_twice``: jobs whose routine started more than once (only attempts
  running at a kill should be); ``run_twice_without_chaos``: of those, jobs
  with no kill or outage between their first and last start, and
  ``run_twice_after_a_lease_expired_unkilled``: of those, jobs re-queued
  because a live process's lease expired (it renewed too late: a loaded
  machine, ``lease_ttl`` 3 s); ``suspects``: the first few, with details;
  ``completed_twice``: jobs whose routine ran to its end more than once (a
  run whose outcome a kill or an outage kept from the store);
  ``ran_after_its_outcome_committed``: jobs that started again after their
  final outcome committed (a trigger logs each final outcome in the
  transaction that commits it), and ``outcome_committed_twice``: both must
  be 0, failovers included;
- ``max_past_due_s`` / ``p99_past_due_s``: how long after its due time
  (its submission) a job's routine first started;
- ``max_due_idle_s``: the longest stretch with a job due and no job
  starting. A job is due from when its ``submit`` returned until its routine
  first starts; a stretch is a gap between two consecutive starts (of any
  job, any attempt) during which some job was due, from the later of the
  gap's start and that job's due time (`failover.due_stretches`). It
  bounds idle workers from above (with every worker busy a due job waits
  too), and does not count a submit held up in flight (not yet due).
  ``max_due_idle_outside_failovers_s`` leaves out stretches overlapping a
  failover (kill to standby rebuilt); ``due_idle_over_1s`` counts those over
  1 s; ``longest_due_idle``: the top five (seconds into the soak);
- the chaos done: ``dispatcher_kills``, ``worker_kills``, ``postgres_restarts``,
  ``failovers``; per failover: ``failover_s``, from the SIGKILL to the first
  ``submit`` that returned after it (its commit is on the new primary),
  ``promote_s`` (SIGKILL to promoted) and ``rebuild_s`` (old primary back as
  a synchronous standby); ``slow_promotions_log``: the promoted node's log
  lines when a promotion took over 2 s;
- ``dispatcher_rss``: per dispatching process alive at the end, its RSS
  (KiB) once it had run ``RSS_WARMUP_S`` and at the end, and how long it lived.

``--postgres auto`` (default) starts a throwaway server (tests/pg.py; PostgreSQL must be installed).
Run it with ``nice``: it is meant to share the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import tempfile
import time
from collections import defaultdict
from typing import Any

import uvloop

from bench.soak import report as soak_report
from bench.soak.dispatcher import Dispatcher

CHAOS_EVERY_S = (4.0, 12.0)  # pause between two random kills
RESTART_AFTER_S = (0.5, 3.0)  # a killed dispatcher comes back after this
PG_DOWN_S = 3.0
RSS_WARMUP_S = 10.0  # a dispatching process's "start" RSS is taken once it has run this long


def restart_times(duration: float, every: float) -> list[float]:
    """When (seconds into the soak) PostgreSQL is restarted: every ``every`` seconds, or once half-way (0)."""
    if every <= 0:
        return [duration / 2]
    return [every * i for i in range(1, int(duration // every) + 1) if every * i < duration]


async def soak(
    url: str,
    server: Any,
    duration: float,
    count: int,
    rate: float,
    seed: int,
    restart_every: float = 90.0,
    pair: Any = None,
    failover_every: float = 0.0,
    keep: int = 0,
) -> dict[str, Any]:
    """Run the chaos; `server` (a `tests.pg.Server`) is restarted, or `pair` (a `failover.Pair`) failed over."""
    from bench.soak.failover import install_outcome_log, rss_kib

    rng = random.Random(seed)
    acked: dict[str, float] = {}  # job id -> when its submit returned (wall clock)
    nacked: list[str] = []
    chaos: dict[str, int] = defaultdict(int)
    events: list[tuple[float, float]] = []  # (from, to) wall-clock seconds of each kill or outage
    requeued: list[float] = []  # when a process re-queued the running jobs of one whose lease expired
    failovers: list[dict[str, Any]] = []
    rss: list[dict[str, Any]] = []
    await install_outcome_log(url)
    with tempfile.TemporaryDirectory(prefix="leakypool-soak-") as scratch:
        log = os.path.join(scratch, "runs.log")
        dispatchers = [Dispatcher(i, url, log, rate) for i in range(count)]
        try:
            for d in dispatchers:
                await d.start(acked, nacked, requeued)
            t0, t0_wall = time.monotonic(), time.time()
            restarts = [] if server is None else restart_times(duration, restart_every)
            if pair is not None:
                restarts = restart_times(duration, failover_every)
            while (elapsed := time.monotonic() - t0) < duration:
                for d in dispatchers:  # each process's RSS once it has warmed up
                    if d.rss_first is None and d.process and time.monotonic() - d.started_at >= RSS_WARMUP_S:
                        d.rss_first = (time.monotonic(), rss_kib(d.process.pid) or 0)
                pause = rng.uniform(*CHAOS_EVERY_S)
                if restarts:
                    pause = min(pause, max(0.0, restarts[0] - elapsed))  # a restart comes on time
                await asyncio.sleep(min(pause, max(0.1, duration - elapsed)))
                now = time.monotonic() - t0  # one reading for every branch below (two could straddle a restart time)
                if now >= duration:
                    break
                if restarts and now >= restarts[0] and pair is not None:
                    restarts.pop(0)
                    failovers.append(await asyncio.to_thread(pair.failover))
                    events.append((failovers[-1]["killed"], failovers[-1]["rebuilt"]))
                    chaos["failovers"] += 1
                    continue
                if restarts and now >= restarts[0] and server is not None:
                    restarts.pop(0)
                    mode = ("fast", "immediate")[chaos["postgres_restarts"] % 2]
                    down = time.time()
                    await asyncio.to_thread(server.stop, mode)
                    await asyncio.sleep(PG_DOWN_S)
                    await asyncio.to_thread(server.start)
                    events.append((down, time.time()))
                    chaos["postgres_restarts"] += 1
                    continue
                victim = rng.choice(dispatchers)
                if (rng.random() < 0.5 or victim.index < keep) and victim.workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(rng.choice(victim.workers), signal.SIGKILL)
                        chaos["worker_kills"] += 1
                        events.append((time.time(), time.time()))
                elif victim.index >= keep:
                    events.append((time.time(), time.time()))
                    victim.kill()
                    await victim.reap()
                    chaos["dispatcher_kills"] += 1
                    await asyncio.sleep(rng.uniform(*RESTART_AFTER_S))
                    await victim.start(acked, nacked, requeued)
            for d in dispatchers:
                assert d.process is not None
                first = d.rss_first or (time.monotonic(), None)
                rss.append(
                    {
                        "dispatcher": d.index,
                        "kept": d.index < keep,
                        "pid": d.process.pid,
                        "lived_s": round(time.monotonic() - d.started_at),
                        "rss_kib_warm": first[1],
                        "warm_at_s": round(first[0] - d.started_at),
                        "rss_kib_end": rss_kib(d.process.pid),
                    }
                )
                await d.tell("STOP")
            drained_in = await soak_report.drain(url, acked)
            for d in dispatchers:
                await d.tell("EXIT")
            async with asyncio.timeout(60):
                for d in dispatchers:
                    await d.reap()
        finally:
            for d in dispatchers:
                d.kill()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(d.reap(), 30)
        return await soak_report.report(
            url,
            log,
            acked,
            nacked,
            dict(chaos),
            events,
            requeued,
            drained_in,
            duration,
            {"failovers": failovers, "rss": rss, "t0": t0_wall},
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of submits and chaos (default 600)")
    parser.add_argument("--dispatchers", type=int, default=3)
    parser.add_argument("--rate", type=float, default=10.0, help="submits per second per dispatching process")
    parser.add_argument("--postgres", default="auto", help="auto (a throwaway server) or a URL (then no restart)")
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument(
        "--pg-restart-every",
        type=float,
        default=90.0,
        help="seconds between PostgreSQL restarts, alternately fast and immediate (0: once, half-way)",
    )
    parser.add_argument(
        "--failover-every",
        type=float,
        default=0.0,
        help="seconds between failovers of a primary + synchronous standby (replaces restarts; 0: off)",
    )
    parser.add_argument(
        "--keep",
        type=int,
        default=None,
        help="dispatching processes never SIGKILLed (default 1 with --failover-every, else 0)",
    )
    args = parser.parse_args()
    if args.failover_every > 0 and args.postgres != "auto":
        parser.error("--failover-every needs --postgres auto: the soak starts the primary and its standby")
    keep = args.keep if args.keep is not None else int(args.failover_every > 0)
    if args.postgres != "auto":
        result = uvloop.run(
            soak(args.postgres, None, args.duration, args.dispatchers, args.rate, args.seed, 0, keep=keep)
        )
    elif args.failover_every > 0:
        from bench.soak.failover import pair

        with pair("soak") as cluster:
            result = uvloop.run(
                soak(
                    cluster.url(),
                    None,
                    args.duration,
                    args.dispatchers,
                    args.rate,
                    args.seed,
                    pair=cluster,
                    failover_every=args.failover_every,
                    keep=keep,
                )
            )
    else:
        from tests import pg

        with pg.server() as server:
            server.psql(f"CREATE DATABASE soak OWNER {pg.USER}")
            result = uvloop.run(
                soak(
                    server.url("soak"),
                    server,
                    args.duration,
                    args.dispatchers,
                    args.rate,
                    args.seed,
                    args.pg_restart_every,
                    keep=keep,
                )
            )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
