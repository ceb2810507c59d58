"""Submits while PostgreSQL restarts (issue #25): what raised, what was duplicated, what was lost.

N concurrent submitters call ``echo.submit(token)`` on a ``WorkerPool(spawn=2)``
with a PostgreSQL store while the server is restarted K times, alternating
``pg_ctl stop -m fast`` and ``-m immediate``. Then every job returned is
awaited and the store is counted:

    submits_raised      submit calls that raised (target 0), by error
    rows_not_returned   rows in the store no successful submit returned (a
                        second job for one submit, or a raised submit that
                        committed anyway; target 0)
    lost                jobs a submit returned that never succeeded with their own token (target 0)
    rerun               jobs that took more than one attempt (at-least-once: allowed, reported)

Prints one JSON object. Run from the repository root::

    python -m bench.bench_store_restart [--submitters 32] [--restarts 6] [--interval 2] [--store-retry 10] [--split]

``--split`` submits from a second pool without workers, so every job is
leased by the pool that has them (leases, not only submits, ride the restarts).

It starts a throwaway PostgreSQL server as the tests do (PostgreSQL must
be installed). CPU seconds come from /proc (this process and its children).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import logging
import os
import time

import uvloop

import pool
from bench.support import routines
from bench.support.workloads import log


def cpu_s() -> float:
    """CPU seconds of this process and its reaped children (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Retries(logging.Handler):
    """Counts store calls that met a lost connection and were tried again (by the error that started it)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.by_error: collections.Counter = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("store out of reach"):
            args = record.args if isinstance(record.args, tuple) else ()
            cause = str(args[1]).split(": ", 2)[1] if len(args) > 1 else "?"
            self.by_error[cause.split(":")[0]] += 1


async def submitter(n: int, stop: asyncio.Event, ok: list, raised: collections.Counter) -> None:
    i = 0
    while not stop.is_set():
        token = f"{n}-{i}"
        i += 1
        try:
            ok.append((token, await routines.echo.submit(token)))
        except Exception as exc:  # noqa: BLE001 - counted and reported: the figure this bench is for
            raised[f"{type(exc).__name__}: {str(exc).split(': ', 1)[-1][:80]}"] += 1
        await asyncio.sleep(0.005)


async def run(
    server, url: str, submitters: int, restarts: int, interval: float, store_retry: float, split: bool
) -> dict:
    ok: list = []
    raised: collections.Counter = collections.Counter()
    retries = Retries()
    jobs_log = logging.getLogger("leakypool.jobs")
    jobs_log.addHandler(retries)
    jobs_log.setLevel(logging.INFO)
    downtimes = []
    started_cpu, started = cpu_s(), time.monotonic()
    async with contextlib.AsyncExitStack() as pools:
        p = await pools.enter_async_context(pool.WorkerPool(spawn=2, store=url, store_retry=store_retry))
        if split:  # submits from a process without workers: the one above leases every job (leases under restarts)
            await pools.enter_async_context(
                pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=url, store_retry=store_retry)
            )
        stop = asyncio.Event()
        tasks = [asyncio.ensure_future(submitter(n, stop, ok, raised)) for n in range(submitters)]
        try:
            for k in range(restarts):
                await asyncio.sleep(interval)
                mode = "fast" if k % 2 == 0 else "immediate"
                down = time.monotonic()
                await asyncio.to_thread(server.stop, mode)
                await asyncio.to_thread(server.start)
                downtimes.append(round(time.monotonic() - down, 3))
                log(
                    f"restart {k + 1}/{restarts} ({mode}): {downtimes[-1]:.2f}s; {len(ok)} submitted, "
                    f"{sum(raised.values())} raised"
                )
            await asyncio.sleep(interval)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        submit_s = time.monotonic() - started
        lost, rerun = 0, 0
        for token, job in ok:
            try:
                if await job.result(timeout=120) != token:
                    lost += 1
            except Exception:  # noqa: BLE001 - a lost job of any kind is counted: the figure this bench is for
                lost += 1
            rerun += job.attempts > 1
        rows = sum((await p.jobs.counts()).values())
    return {
        "bench": "store_restart",
        "submitters": submitters,
        "restarts": restarts,
        "restart_modes": "fast/immediate alternating",
        "topology": "a worker-less submitting pool + a pool with 2 workers" if split else "one pool, 2 workers",
        "restart_downtime_s": downtimes,
        "store_retry_s": store_retry,
        "submits_ok": len(ok),
        "submits_raised": sum(raised.values()),
        "raised_by_error": dict(raised.most_common()),
        "rows_in_store": rows,
        "rows_not_returned": rows - len(ok),
        "lost": lost,
        "rerun": rerun,
        "calls_retried": sum(retries.by_error.values()),
        "retried_by_error": dict(retries.by_error.most_common()),
        "submits_per_s": round(len(ok) / submit_s, 1),
        "cpu_s": round(cpu_s() - started_cpu, 2),
        "wall_s": round(time.monotonic() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--submitters", type=int, default=32)
    parser.add_argument("--restarts", type=int, default=6)
    parser.add_argument("--interval", type=float, default=2.0, help="seconds of submitting between restarts")
    parser.add_argument("--store-retry", type=float, default=10.0)
    parser.add_argument("--split", action="store_true", help="submit from a worker-less pool (every job is leased)")
    args = parser.parse_args()
    from tests import pg

    with pg.server() as server:
        server.psql(f"CREATE DATABASE bench_restart OWNER {pg.USER}")
        result = uvloop.run(
            run(
                server,
                server.url("bench_restart"),
                args.submitters,
                args.restarts,
                args.interval,
                args.store_retry,
                args.split,
            )
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
