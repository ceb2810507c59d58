"""A dispatching process for the restart test: submits a backlog of jobs (once), then drains it.

    python -m tests.integration.support.job_driver STORE_URL MARKERS COUNT SECONDS

Submits COUNT jobs of ``routines.mark`` with ids ``job-<i>`` (idempotent:
a restart submits nothing new while they are active), prints ``SUBMITTED``,
then waits until every job is final and prints ``DRAINED``.
"""

from __future__ import annotations

import asyncio
import sys

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines


async def main(url: str, markers: str, count: int, seconds: float) -> None:
    async with pool.WorkerPool(spawn=2, backpressure=TaskCountBackpressure(1), store=url, lease_ttl=1.0) as p:
        existing = await p.jobs.get("job-0")
        if existing is None:
            await asyncio.gather(
                *(routines.mark.options(job_id=f"job-{i}").submit(markers, f"job-{i}", seconds) for i in range(count))
            )
        print("SUBMITTED", flush=True)
        for i in range(count):
            await (await p.jobs.get(f"job-{i}")).result(timeout=600)
        print("DRAINED", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
