"""A dispatching process with one worker that runs a store's jobs until told to stop, for tests.

    python -m tests.integration.support.store_runner STORE_URL [LEASE_TTL]

Prints ``READY <worker pid>`` once open, then runs until a line arrives on stdin (or stdin closes).
"""

from __future__ import annotations

import asyncio
import sys

import pool


async def main(url: str, ttl: float) -> None:
    async with pool.WorkerPool(spawn=1, store=url, lease_ttl=ttl) as p:
        print("READY", *p.pids, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 10.0))
