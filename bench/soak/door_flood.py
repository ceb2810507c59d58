"""The full-size flood of issue 51 (finding 4): another user opens ~20,000 silent connections to a worker's port.

``nobody`` (root runs this: it becomes that user with runuser) opens COUNT plain TCP connections to a
``leakypool-worker --port`` and sends nothing, twice, while this user's pools keep calling it. Prints one JSON
object: how many connections the worker closed, the worker's RSS before and after each flood, and this user's
call latency during the floods (a new pool dialling, then a sequential call). Before the door, the worker ran
out of descriptors, the user's call failed after 15 s and the worker grew from 44 to 265 MB. Run::

    python -m bench.soak.door_flood              # 19,990 connections per flood
    python -m bench.soak.door_flood --count 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

import uvloop

import pool
from bench.support import routines
from tests.integration.support.strangers import needs_root, run_as_nobody, shared_directory
from tests.integration.support.workers import static, worker
from tests.integration.trust.test_door import FLOOD_SCRIPT, rss

_ = needs_root  # (the same condition: root, to become nobody)


async def one_call(w) -> float:
    """A new pool of this user's, dialling the worker now, and one call: seconds to the result."""
    started = time.perf_counter()
    async with pool.WorkerPool(discovery=static(w)) as p:
        await p.wait_for_workers(1, timeout=60)
        await routines.noop()
    return time.perf_counter() - started


async def main(count: int) -> dict[str, object]:
    if os.getuid() != 0:
        raise SystemExit("door_flood: run as root (it runs the flood as nobody)")
    report: dict[str, object] = {"count": count}
    with shared_directory() as shared:
        async with worker("--port", "0") as w:
            await one_call(w)
            report["rss_before_mb"] = round(rss(w.pid) / 2**20, 1)
            for round_ in (1, 2):
                out = os.path.join(shared, f"flood{round_}.json")
                flooding = asyncio.ensure_future(
                    run_as_nobody(shared, f"flood{round_}.py", FLOOD_SCRIPT, str(w.port), str(count), out)
                )
                during = []
                while not flooding.done():
                    during.append(await one_call(w))
                await flooding
                with open(out) as f:
                    report[f"flood{round_}"] = json.load(f)
                report[f"flood{round_}_calls_s"] = {
                    "n": len(during),
                    "max": round(max(during), 3),
                    "median": round(sorted(during)[len(during) // 2], 3),
                }
                report[f"rss_after_flood{round_}_mb"] = round(rss(w.pid) / 2**20, 1)
            report["after_s"] = round(await one_call(w), 3)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=19_990, help="connections per flood (default: the issue's)")
    print(json.dumps(uvloop.run(main(parser.parse_args().count)), indent=2))
