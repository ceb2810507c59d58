"""Chaos soak for durable jobs across processes: nothing acknowledged is lost.

    python -m bench.soak_jobs [--duration 600] [--dispatchers 3] [--rate 10] [--postgres auto|URL] [--seed N]
                              [--pg-restart-every 90]

Three dispatching processes (each ``WorkerPool(spawn=2, store=PG)``) share
one PostgreSQL store and submit jobs continuously (``retries=20``; each
job sleeps 20-300 ms and logs its start and end in a shared file). Meanwhile,
at random: a dispatching process is SIGKILLed (its workers go with it, its
jobs are re-queued by the others once its lease expires) and restarted a
moment later, or one of their workers is SIGKILLed (its attempt fails and
is retried); and every ``--pg-restart-every`` seconds (default 90; 0: once,
half-way) PostgreSQL itself is stopped, alternately ``fast`` (a clean
shutdown that ends every session) and ``immediate`` (as a crash), and started
again ``PG_DOWN_S`` later: submits ride over it (``store_retry``, 10 s by
default). When the time is up, submitting stops and the backlog drains. It
prints JSON:

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
- ``max_past_due_s`` / ``p99_past_due_s``: how long after its due time
  (its submission) a job's routine first started;
- the chaos done: ``dispatcher_kills``, ``worker_kills``, ``postgres_restarts``.

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
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import uvloop

LEASE_TTL_S, SPAWN, CAPACITY = 3.0, 2, 8
CHAOS_EVERY_S = (4.0, 12.0)  # pause between two random kills
RESTART_AFTER_S = (0.5, 3.0)  # a killed dispatcher comes back after this
PG_DOWN_S = 3.0
DRAIN_LIMIT_S = 240.0


# -- one dispatching process ------------------------------------------------------------------


async def dispatcher(url: str, name: str, log: str, rate: float) -> None:
    """Submit jobs until "STOP" on stdin, printing ACK/NACK per submit and WORKERS pids; exit on "EXIT"."""
    import pool
    from backpressure import TaskCountBackpressure
    from bench.soak_routines import soak_task

    rng = random.Random(f"{name}-{os.getpid()}")
    commands: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def read_commands() -> None:
        while line := await reader.readline():
            await commands.put(line.decode().strip())
        await commands.put("EXIT")

    async with pool.WorkerPool(
        spawn=SPAWN, backpressure=TaskCountBackpressure(CAPACITY), store=url, lease_ttl=LEASE_TTL_S, shutdown_grace=2.0
    ) as p:
        print("WORKERS", *p.pids, flush=True)
        reading = asyncio.ensure_future(read_commands())
        n = 0
        stop = False
        last_pids: list[int] = []
        while not stop:
            job_id = f"{name}-{n}"
            n += 1
            try:
                await soak_task.options(job_id=job_id, retries=20, dispatch_deadline=3600).submit(
                    log, job_id, rng.uniform(0.02, 0.3)
                )
            except pool.PoolError as exc:
                print("NACK", job_id, type(exc).__name__, flush=True)
            else:
                print("ACK", job_id, flush=True)
            if p.pids != last_pids:
                last_pids = list(p.pids)
                print("WORKERS", *last_pids, flush=True)
            await asyncio.sleep(rng.expovariate(rate))
            while not commands.empty():
                stop = stop or (await commands.get()) in ("STOP", "EXIT")
        print("STOPPED", flush=True)
        while (await commands.get()) != "EXIT":
            print("WORKERS", *p.pids, flush=True)
        reading.cancel()


# -- the orchestrator -------------------------------------------------------------------------


class Dispatcher:
    """One dispatching process the soak runs, kills and restarts."""

    def __init__(self, index: int, url: str, log: str, rate: float) -> None:
        self.index, self.url, self.log, self.rate = index, url, log, rate
        self.generation = 0
        self.process: asyncio.subprocess.Process | None = None
        self.workers: list[int] = []
        self.reader: asyncio.Future[Any] | None = None

    async def start(self, acked: set[str], nacked: list[str], requeued: list[float]) -> None:
        self.generation += 1
        name = f"d{self.index}g{self.generation}"
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.soak_jobs",
            "--child",
            self.url,
            name,
            self.log,
            str(self.rate),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.reader = asyncio.ensure_future(
            asyncio.gather(self._read(self.process, acked, nacked), self._read_log(self.process, requeued))
        )

    @staticmethod
    async def _read_log(process: asyncio.subprocess.Process, requeued: list[float]) -> None:
        """Pass the process's log on; note when it re-queued the running jobs of a process whose lease expired."""
        assert process.stderr is not None
        while line := await process.stderr.readline():
            if b"re-queued" in line:
                requeued.append(time.time())
            sys.stderr.write(line.decode(errors="replace"))

    async def _read(self, process: asyncio.subprocess.Process, acked: set[str], nacked: list[str]) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            kind, *rest = line.decode().split()
            if kind == "ACK":
                acked.add(rest[0])
            elif kind == "NACK":
                nacked.append(rest[0])
            elif kind == "WORKERS":
                self.workers = [int(pid) for pid in rest]

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    async def reap(self) -> None:
        if self.process is not None:
            await self.process.wait()
        if self.reader is not None:
            await self.reader

    async def tell(self, command: str) -> None:
        if self.process is not None and self.process.stdin is not None and self.process.returncode is None:
            with contextlib.suppress(ConnectionError):
                self.process.stdin.write(command.encode() + b"\n")
                await self.process.stdin.drain()


def restart_times(duration: float, every: float) -> list[float]:
    """When (seconds into the soak) PostgreSQL is restarted: every ``every`` seconds, or once half-way (0)."""
    if every <= 0:
        return [duration / 2]
    return [every * i for i in range(1, int(duration // every) + 1) if every * i < duration]


async def soak(
    url: str, server: Any, duration: float, count: int, rate: float, seed: int, restart_every: float = 90.0
) -> dict[str, Any]:
    rng = random.Random(seed)
    acked: set[str] = set()
    nacked: list[str] = []
    chaos: dict[str, int] = defaultdict(int)
    events: list[tuple[float, float]] = []  # (from, to) wall-clock seconds of each kill or outage
    requeued: list[float] = []  # when a process re-queued the running jobs of one whose lease expired
    with tempfile.TemporaryDirectory(prefix="leakypool-soak-") as scratch:
        log = os.path.join(scratch, "runs.log")
        dispatchers = [Dispatcher(i, url, log, rate) for i in range(count)]
        try:
            for d in dispatchers:
                await d.start(acked, nacked, requeued)
            t0 = time.monotonic()
            restarts = [] if server is None else restart_times(duration, restart_every)
            while (elapsed := time.monotonic() - t0) < duration:
                pause = rng.uniform(*CHAOS_EVERY_S)
                if restarts:
                    pause = min(pause, max(0.0, restarts[0] - elapsed))  # a restart comes on time
                await asyncio.sleep(min(pause, max(0.1, duration - elapsed)))
                if time.monotonic() - t0 >= duration:
                    break
                if restarts and time.monotonic() - t0 >= restarts[0]:
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
                if rng.random() < 0.5 and victim.workers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(rng.choice(victim.workers), signal.SIGKILL)
                        chaos["worker_kills"] += 1
                        events.append((time.time(), time.time()))
                else:
                    events.append((time.time(), time.time()))
                    victim.kill()
                    await victim.reap()
                    chaos["dispatcher_kills"] += 1
                    await asyncio.sleep(rng.uniform(*RESTART_AFTER_S))
                    await victim.start(acked, nacked, requeued)
            for d in dispatchers:
                await d.tell("STOP")
            drained_in = await drain(url, acked)
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
        return await report(url, log, acked, nacked, dict(chaos), events, requeued, drained_in, duration)


async def drain(url: str, acked: set[str]) -> float | None:
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
            if not open_ids & acked:
                return round(time.monotonic() - t0, 1)
        await asyncio.sleep(1.0)
    return None


async def report(
    url: str,
    log: str,
    acked: set[str],
    nacked: list[str],
    chaos: dict[str, int],
    events: list[tuple[float, float]],
    requeued: list[float],
    drained_in: float | None,
    duration: float,
) -> dict[str, Any]:
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        rows = {r["id"]: r for r in await db.fetch("SELECT id, state, attempts, created_at FROM leakypool_jobs")}
    finally:
        await db.close()
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
    states: dict[str, int] = defaultdict(int)
    for job_id in acked:
        states[rows[job_id]["state"] if job_id in rows else "missing"] += 1
    twice = [j for j in acked if len(starts.get(j, ())) > 1]
    unexplained = [j for j in twice if not chaos_between(events, min(starts[j]), max(starts[j]))]
    after_expiry = [j for j in unexplained if any(min(starts[j]) <= t <= max(starts[j]) for t in requeued)]
    past_due = sorted(min(starts[j]) - rows[j]["created_at"] for j in acked if j in rows and starts.get(j))
    return {
        "duration_s": duration,
        "submitted": len(acked),
        "submit_errors": len(nacked),
        "unacknowledged_in_store": len(set(rows) - acked),
        "succeeded": states["succeeded"],
        "failed": states["failed"],
        "lost": len(acked) - states["succeeded"] - states["failed"],
        "run_twice": sum(1 for j in acked if len(starts.get(j, ())) > 1),
        "completed_twice": sum(1 for j in acked if ends.get(j, 0) > 1),
        "run_twice_without_chaos": len(unexplained),
        "run_twice_after_a_lease_expired_unkilled": len(after_expiry),
        "suspects": [suspect(j, starts[j], pids[j], requeued) for j in unexplained[:5]],
        "lease_requeues": len(requeued),
        "max_past_due_s": round(past_due[-1], 3) if past_due else None,
        "p99_past_due_s": round(past_due[int(0.99 * (len(past_due) - 1))], 3) if past_due else None,
        "drained_in_s": drained_in,
        **{k: chaos.get(k, 0) for k in ("dispatcher_kills", "worker_kills", "postgres_restarts")},
        "cpu_s": round(sum(os.times()[:4]), 1),
    }


def suspect(job_id: str, starts: list[float], pids: list[str], requeued: list[float]) -> dict[str, Any]:
    """A job run twice with no kill or outage near: its starts and the lease re-queues around them."""
    first = min(starts)
    return {
        "job": job_id,
        "pids": pids,
        "starts_s": [round(t - first, 3) for t in starts],
        "requeues_near_s": [round(t - first, 3) for t in requeued if abs(t - first) < 10],
    }


def chaos_between(events: list[tuple[float, float]], first: float, last: float) -> bool:
    """Whether a kill or an outage happened while a job's first attempt could still have been running."""
    return any(start <= last and end >= first - LEASE_TTL_S for start, end in events)


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
    parser.add_argument("--child", nargs=4, metavar=("URL", "NAME", "LOG", "RATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, name, log, rate = args.child
        uvloop.run(dispatcher(url, name, log, float(rate)))
        return
    if args.postgres != "auto":
        result = uvloop.run(soak(args.postgres, None, args.duration, args.dispatchers, args.rate, args.seed, 0))
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
                )
            )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
