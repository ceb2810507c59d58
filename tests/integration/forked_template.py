"""A process that opens pools whose template is a fork of it; prints what it saw as JSON (test_template runs it).

Run as a script so that the process is single-threaded, as the fork needs
(the test process itself may have threads by then):
``python -m tests.integration.forked_template LOGFILE``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

import uvloop

import pool
from tests.integration import routines


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def main(logfile: str) -> dict[str, object]:
    logging.basicConfig(filename=logfile, level=logging.INFO, format="script %(name)s %(message)s")
    logging.getLogger("script").info("started")
    seen: dict[str, object] = {}
    first = pool.WorkerPool(spawn=2)
    await first.__aenter__()
    closed = False
    try:
        template = first._fleet._template
        seen["forked"] = template.forked
        seen["template_parent_is_us"] = parent_of(template.pid) == os.getpid()
        seen["workers_parent_is_template"] = {parent_of(pid) for pid in first.pids} == {template.pid}
        seen["add"] = await routines.add(2, 3)
        seen["program"] = (await routines.run_program("echo", "hi")).decode()
        await routines.log_warning("from the worker")
        async with pool.WorkerPool(spawn=1) as second:  # its template inherits the first pool's descriptors
            seen["second_forked"] = second._fleet._template.forked
            seen["second_add"] = await routines.add(1, 1)
            await first.__aexit__(None, None, None)
            closed = True
            seen["first_template_exit"] = template.exit_status  # 0: it left when told, not killed after a wait
            seen["second_add_after"] = await routines.add(2, 2)
    finally:
        if not closed:
            await first.__aexit__(None, None, None)
    return seen


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(sys.argv[1]))))
