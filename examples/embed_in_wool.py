"""Embed leakypool's balancer and backpressure hook in another pool: wool's.

``balancer.PriorityLoadBalancer`` and ``backpressure.TaskCountBackpressure``
import nothing from leakypool's pool and follow the same plug-in shapes as
the wool library, so they drop into ``wool.WorkerPool`` unchanged. Here
four wool workers take at most one task each, and tasks go to the lowest
uid with room: two concurrent callers keep only two workers busy.

Needs the optional extra: ``pip install 'leakypool[wool]'``. Run it::

    python examples/embed_in_wool.py --workers 4 --callers 2 --tasks 20
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import os

import wool

from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer


@wool.routine
async def job(seconds: float) -> int:
    await asyncio.sleep(seconds)
    return os.getpid()


async def main(workers: int, callers: int, tasks: int) -> None:
    worker = functools.partial(wool.LocalWorker, backpressure=TaskCountBackpressure(1))
    async with wool.WorkerPool(spawn=workers, worker=worker, loadbalancer=PriorityLoadBalancer()):
        ran_on: collections.Counter[int] = collections.Counter()

        async def caller() -> None:
            for _ in range(tasks):
                ran_on[await job(0.01)] += 1

        await asyncio.gather(*(caller() for _ in range(callers)))
        proxy = wool.__proxy__.get()
        for metadata in sorted(proxy.workers, key=lambda m: m.uid.int):
            print(f"worker uid {metadata.uid} pid {metadata.pid}: {ran_on.get(metadata.pid, 0)} tasks")
    print(f"{sum(ran_on.values())} tasks ran on {len(ran_on)} of {workers} workers")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4, help="wool workers to spawn (default 4)")
    parser.add_argument("--callers", type=int, default=2, help="concurrent callers (default 2)")
    parser.add_argument("--tasks", type=int, default=20, help="tasks per caller (default 20)")
    args = parser.parse_args()
    asyncio.run(main(args.workers, args.callers, args.tasks))
