"""A dispatching process with no workers that submits jobs against a shared ceiling, for tests.

    python -m tests.integration.support.ceiling_replica STORE_URL PREFIX COUNT MAX_PENDING

Waits for a line on stdin (so several start submitting together), submits
COUNT jobs concurrently, prints ``ACCEPTED <n> REJECTED <m>``.
"""

from __future__ import annotations

import asyncio
import sys

import pool
from tests.integration.routines import common as routines


async def main(url: str, prefix: str, count: int, ceiling: int) -> None:
    async with pool.WorkerPool(spawn=0, discovery=pool.StaticDiscovery(), store=url, max_pending=ceiling):
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        outcomes = await asyncio.gather(
            *(routines.add.options(job_id=f"{prefix}{i}").submit(i, i) for i in range(count)), return_exceptions=True
        )
        rejected = sum(isinstance(o, pool.AdmissionRejected) for o in outcomes)
        others = [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, pool.AdmissionRejected)]
        if others:
            raise others[0]
        print(f"ACCEPTED {count - rejected} REJECTED {rejected}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
