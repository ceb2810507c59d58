"""One of several processes that schedule the same periodic job on one store, for tests.

    python -m tests.integration.support.cron_replica STORE_URL MARKERS CRON

Schedules ``routines.mark(MARKERS, "tick")`` at every slot of CRON, prints
``SCHEDULED <name>``, and runs until a line arrives on stdin (or stdin closes).
"""

from __future__ import annotations

import asyncio
import sys

import pool
from tests.integration.routines import common as routines


async def main(url: str, markers: str, cron: str) -> None:
    async with pool.WorkerPool(spawn=1, store=url) as p:
        print("SCHEDULED", p.schedule(routines.mark, cron=cron, args=(markers, "tick")), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
