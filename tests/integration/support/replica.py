"""One of several dispatching processes (API replicas) sharing one job store, for tests.

    python -m tests.integration.support.replica STORE_URL MARKERS FIRST COUNT TOTAL [LEASE_TTL]

Submits jobs ``j<FIRST>`` .. ``j<FIRST+COUNT-1>`` of ``routines.interval`` in
the queue ``shared`` (1 per key, 3 in all; keys ``k0``..``k9``), prints
``SUBMITTED <worker pid>``, then waits until all TOTAL jobs (whoever runs
them) are final and prints ``DRAINED``. Meanwhile it prints ``REVIVED <unix
time>`` when it re-queues a dead replica's running jobs, and ``TICK <now>``
each time its owner-lease tick renews its lease (``now``: the time it renewed
with; the same tick then looks for dead owners' jobs). One worker, four tasks at a time: without the
store's limits, three replicas would run up to twelve at once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Any

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines

SHARED = pool.Queue("shared", concurrency=1, total=3)


class CountedRecoveries:
    """The pool's own store, printing what its lease tick does with it (instrumentation only)."""

    def __init__(self, store: Any) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def heartbeat(self, owner: str, now: float, ttl: float) -> Any:
        done = await self._store.heartbeat(owner, now, ttl)
        print("TICK", now, flush=True)
        return done


class Revivals(logging.Handler):
    """Prints when this process re-queues a dead replica's running jobs (for the recovery time)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("re-queued"):
            print("REVIVED", time.time(), flush=True)


async def main(url: str, markers: str, first: int, count: int, total: int, ttl: float) -> None:
    logging.getLogger("leakypool.jobs").addHandler(Revivals())
    async with pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(4), store=url, lease_ttl=ttl) as p:
        await asyncio.gather(
            *(
                routines.interval.options(queue=SHARED, key=f"k{i % 10}", job_id=f"j{i}").submit(
                    markers, f"j{i}", f"k{i % 10}", 0.01
                )
                for i in range(first, first + count)
            )
        )
        print("SUBMITTED", *p.pids, flush=True)
        presence = p._layers.scheduler._presence  # type: ignore[union-attr]
        presence.store = CountedRecoveries(presence.store)  # the tick reads it anew each time (TICK lines)
        async with asyncio.timeout(600):
            for i in range(total):
                while (job := await p.jobs.get(f"j{i}")) is None:  # another replica's, not submitted yet
                    await asyncio.sleep(0.05)  # (no event crosses processes here; bounded by the timeout)
                await job.result()
        print("DRAINED", flush=True)


if __name__ == "__main__":
    ttl = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), ttl))
