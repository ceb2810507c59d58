"""Elasticity of provisioned capacity: a burst served by workers a CommandProvisioner starts (0 -> max -> 0).

    python -m bench.plots.provisioned [--smoke] [--registry URL] [--out docs/occupancy-provisioned.png]

A pool with no worker of its own (``provisioner=CommandProvisioner(...)``,
``max_workers=6``, workers of capacity 4 with ``--idle-timeout 2``) and a
`StoreDiscovery` registry (SQLite in a temporary directory, or ``--registry``
for PostgreSQL) idles, then 24 closed-loop clients call ``sleep(0.05)``
for 10 s, then stop. Each worker is a ``worker_main.py`` process the
provisioning command starts; it joins through the registry and leaves
by itself once idle. Every 0.1 s the bench samples each worker's own
in-flight count. It prints JSON:

- ``time_to_first_worker_s``: from the first call of the burst to the
  first provisioned worker serving (the command, an interpreter start,
  the registry write and the pool's notification);
- ``time_to_max_workers_s``: to ``max_workers`` workers;
- ``time_to_drain_s``: from the end of the load to no worker left
  (idle timeout + exit + record removal);
- ``calls``, ``failed``: every call must succeed;
- ``records_left``: registry rows once drained (must be 0).

``--smoke`` runs a shorter burst (for the test suite). Needs the ``plot``
extra (matplotlib), imported only to draw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import sys
import tempfile
import time
from typing import Any

import uvloop

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from bench.plots.occupancy import SAMPLE_S, sample_occupancy
from bench.support import routines

CAPACITY, MAX_WORKERS, IDLE_TIMEOUT, TASK_S, CLIENTS = 4, 6, 2.0, 0.05, 24
IDLE_BEFORE_S, BURST_S, DRAIN_LIMIT_S = 2.0, 10.0, 30.0
EMPTY_SAMPLE_S = 5.0
"""Once no worker is left, how long the bench waits for the sampler to see the pool empty."""


async def run(registry: str, scale: float) -> dict[str, Any]:
    samples: list[tuple[float, dict[str, int]]] = []
    calls = failed = 0
    provisioner = pool.CommandProvisioner([sys.executable, "worker_main.py", "{worker_args}", "--log-level", "WARNING"])
    async with pool.WorkerPool(
        provisioner=provisioner,
        max_workers=MAX_WORKERS,
        idle_timeout=IDLE_TIMEOUT,
        discovery=pool.StoreDiscovery(registry, poll_interval=0.2),
        backpressure=TaskCountBackpressure(CAPACITY),
        loadbalancer=PriorityLoadBalancer(),
        queue_depth=1000,
        dispatch_deadline=120,
    ) as p:
        t0 = time.monotonic()
        done = asyncio.Event()

        async def client(stop: asyncio.Event) -> None:
            nonlocal calls, failed
            while not stop.is_set():
                calls += 1
                try:
                    await routines.sleeper(TASK_S)
                except pool.PoolError:
                    failed += 1

        sampler = asyncio.ensure_future(sample_occupancy(p, t0, samples, done))
        stop = asyncio.Event()
        try:
            await asyncio.sleep(IDLE_BEFORE_S)
            burst_at = time.monotonic() - t0
            clients = [asyncio.ensure_future(client(stop)) for _ in range(CLIENTS)]
            await asyncio.sleep(BURST_S * scale)
            stop.set()
            await asyncio.gather(*clients)
            quiet_at = time.monotonic() - t0
            with contextlib.suppress(TimeoutError):
                await p._layers.membership.until(lambda: not p.workers, DRAIN_LIMIT_S)
                await asyncio.sleep(1.0)  # a last second of the empty pool on the plot
                async with asyncio.timeout(EMPTY_SAMPLE_S):  # and a sample of it: one State round begun
                    while not samples or samples[-1][1]:  # (one begun before the last worker left can take 1 s)
                        await asyncio.sleep(SAMPLE_S)
        finally:
            done.set()
            with contextlib.suppress(Exception):
                await sampler
        left = await records(registry)
    return {
        "samples": samples,
        "burst_at": burst_at,
        "quiet_at": quiet_at,
        "calls": calls,
        "failed": failed,
        "records_left": left,
        "provision_failures": p.stats().provision_failures,
    }


async def records(url: str) -> int:
    """Rows left in the registry table."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite://"))) as db:
            return int(db.execute("SELECT count(*) FROM leakypool_workers").fetchone()[0])
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        return int(await db.fetchval("SELECT count(*) FROM leakypool_workers"))
    finally:
        await db.close()


def figures(result: dict[str, Any]) -> dict[str, Any]:
    samples, burst, quiet = result["samples"], result["burst_at"], result["quiet_at"]
    first = next((t for t, s in samples if t >= burst and s), None)
    full = next((t for t, s in samples if t >= burst and len(s) >= MAX_WORKERS), None)
    drained = next((t for t, s in samples if t >= quiet and not s), None)
    return {
        "time_to_first_worker_s": None if first is None else round(first - burst, 2),
        "time_to_max_workers_s": None if full is None else round(full - burst, 2),
        "time_to_drain_s": None if drained is None else round(drained - quiet, 2),
        "max_workers_alive": max((len(s) for _, s in samples), default=0),
        "calls": result["calls"],
        "failed": result["failed"],
        "records_left": result["records_left"],
        "provision_failures": result["provision_failures"],
    }


def draw(result: dict[str, Any], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = result["samples"]
    fig, ax = plt.subplots(figsize=(12, 4))
    times = [t for t, _ in samples]
    for rank, uid in enumerate(sorted({uid for _, s in samples for uid in s})):
        ax.plot(times, [s.get(uid, float("nan")) for _, s in samples], lw=1.2, label=f"worker {rank + 1} (…{uid[-4:]})")
    ax.step(times, [len(s) for _, s in samples], where="post", color="black", lw=2, label="provisioned workers alive")
    for at, text in ((result["burst_at"], "burst starts"), (result["quiet_at"], "load ends")):
        ax.axvline(at, color="grey", lw=0.8, ls=":")
        ax.text(at, MAX_WORKERS + 0.3, text, fontsize=8, color="grey")
    ax.set_title(
        f"{CLIENTS} clients, CommandProvisioner up to {MAX_WORKERS} workers "
        f"(capacity {CAPACITY}, idle timeout {IDLE_TIMEOUT:g}s)"
    )
    ax.set_xlabel("seconds")
    ax.set_ylabel("in flight / workers")
    ax.set_ylim(0, max(CAPACITY, MAX_WORKERS) + 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


async def main(scale: float, registry: str | None, out: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        url = registry or f"sqlite:///{scratch}/registry.db"
        result = await run(url, scale)
    draw(result, out)
    return {"png": out, "scale": scale, "registry": url.split(":", 1)[0], **figures(result)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a shorter burst (for tests)")
    parser.add_argument("--registry", default=None, help="registry URL (default: SQLite in a temporary directory)")
    parser.add_argument("--out", default="docs/occupancy-provisioned.png")
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(0.3 if args.smoke else 1.0, args.registry, args.out)), indent=2))
