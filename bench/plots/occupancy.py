"""Occupancy over a load ramp: workers alive and in flight per worker, PriorityLoadBalancer beside RoundRobin.

    python -m bench.plots.occupancy [--smoke] [--out docs/occupancy.png]

A pool with ``spawn=1, max_workers=6, idle_timeout=2`` and workers that
take 4 tasks each runs closed-loop clients calling ``sleep(0.05)``: 4, then
12, 20, 8 and 0 clients (needing 1, 3, 5, 2 and 0 workers). Every 0.1 s it
samples each worker's own in-flight count (State RPC). It prints JSON with
the figures the picture proves, per balancer:

- ``busy_workers_in_steady_phase``: workers running tasks, averaged over the
  second half of the 12-client phase (needs 3);
- ``surplus_exit_s``: after the load drops from 20 to 8 clients, seconds
  until the pool is back to the workers it needs;
- ``grew`` / ``shrank``: how often the pool changed size (flapping).

``--smoke`` runs a shortened ramp (for the test suite). Needs the ``plot``
extra (matplotlib), imported only to draw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import time
from typing import Any

import uvloop

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from bench.support import routines

CAPACITY, MAX_WORKERS, IDLE_TIMEOUT, TASK_S, SAMPLE_S = 4, 6, 2.0, 0.05, 0.1
PHASES = [(4, 6.0), (12, 10.0), (20, 10.0), (8, 10.0), (0, 6.0)]  # (clients, seconds)
SMOKE_SCALE = 0.2  # --smoke: each phase this fraction as long (the steady phase's measured half: 1 s, ~8 samples)


async def sample_occupancy(
    p: pool.WorkerPool, t0: float, samples: list[tuple[float, dict[str, int]]], done: asyncio.Event
) -> None:
    """Every `SAMPLE_S` until ``done``: each worker's in-flight count by uid (State RPC), at seconds since ``t0``."""
    while not done.is_set():
        states = await p.worker_states(timeout=1.0)
        samples.append((time.monotonic() - t0, {str(uid): s.in_flight for uid, s in states.items()}))
        await asyncio.sleep(SAMPLE_S)


async def client(stop: asyncio.Event) -> None:
    while not stop.is_set():
        await routines.sleeper(TASK_S)


async def run(balancer: Any, scale: float) -> dict[str, Any]:
    samples: list[tuple[float, dict[str, int]]] = []
    phase_starts: list[float] = []
    async with pool.WorkerPool(
        spawn=1,
        max_workers=MAX_WORKERS,
        idle_timeout=IDLE_TIMEOUT,
        backpressure=TaskCountBackpressure(CAPACITY),
        loadbalancer=balancer,
        queue_depth=1000,
        dispatch_deadline=600,
    ) as p:
        t0 = time.monotonic()
        done = asyncio.Event()

        sampler = asyncio.ensure_future(sample_occupancy(p, t0, samples, done))
        clients: list[tuple[asyncio.Task[None], asyncio.Event]] = []
        try:
            for count, seconds in PHASES:
                phase_starts.append(time.monotonic() - t0)
                while len(clients) < count:
                    stop = asyncio.Event()
                    clients.append((asyncio.ensure_future(client(stop)), stop))
                while len(clients) > count:
                    task, stop = clients.pop()
                    stop.set()
                    await task
                await asyncio.sleep(seconds * scale)
        finally:
            done.set()
            for _task, stop in clients:
                stop.set()
            await asyncio.gather(*(t for t, _ in clients), return_exceptions=True)
            with contextlib.suppress(Exception):
                await sampler
        grown = p.stats().grown
    return {"samples": samples, "phases": phase_starts, "grown": grown}


def figures(result: dict[str, Any], scale: float) -> dict[str, Any]:
    samples, phases = result["samples"], result["phases"]
    steady_from = phases[1] + PHASES[1][1] * scale / 2
    steady = [s for t, s in samples if steady_from <= t < phases[2]]
    busy = sum(sum(1 for n in s.values() if n > 0) for s in steady) / max(1, len(steady))
    alive = [len(s) for _, s in samples]
    grew = sum(1 for a, b in itertools.pairwise(alive) if b > a)
    shrank = sum(1 for a, b in itertools.pairwise(alive) if b < a)
    needed = -(-PHASES[3][0] // CAPACITY)
    exit_s = None
    for t, s in samples:
        if t >= phases[3] and len(s) <= needed:
            exit_s = round(t - phases[3], 2)
            break
    return {
        "busy_workers_in_steady_phase": round(busy, 2),
        "needed_in_steady_phase": -(-PHASES[1][0] // CAPACITY),
        "surplus_exit_s": exit_s,
        "max_workers_alive": max(alive, default=0),
        "grew": grew,
        "shrank": shrank,
    }


def draw(results: dict[str, dict[str, Any]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    for ax, (name, result) in zip(axes, results.items(), strict=False):
        samples = result["samples"]
        uids = sorted({uid for _, s in samples for uid in s})
        times = [t for t, _ in samples]
        for rank, uid in enumerate(uids):
            ax.plot(
                times,
                [s.get(uid, float("nan")) for _, s in samples],
                lw=1.2,
                label=f"worker {rank + 1} (uid …{uid[-4:]})",
            )
        ax.step(times, [len(s) for _, s in samples], where="post", color="black", lw=2, label="workers alive")
        for start in result["phases"]:
            ax.axvline(start, color="grey", lw=0.5, ls=":")
        ax.set_title(f"{name}: in flight per worker (capacity {CAPACITY}) and workers alive")
        ax.set_ylabel("tasks / workers")
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    axes[-1].set_xlabel("seconds (load: " + ", ".join(f"{c} clients" for c, _ in PHASES) + ")")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


async def main(scale: float, out: str) -> dict[str, Any]:
    results = {
        "PriorityLoadBalancer": await run(PriorityLoadBalancer(), scale),
        "RoundRobinLoadBalancer": await run(RoundRobinLoadBalancer(), scale),
    }
    draw(results, out)
    return {"png": out, "scale": scale, **{name: figures(r, scale) for name, r in results.items()}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a shortened ramp (for tests)")
    parser.add_argument("--out", default="docs/occupancy.png")
    args = parser.parse_args()
    print(json.dumps(uvloop.run(main(SMOKE_SCALE if args.smoke else 1.0, args.out)), indent=2))
