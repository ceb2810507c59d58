"""A process that opens pools whose template is a fork of it; prints what it saw as JSON (test_template runs it).

Run as a script so that the process is single-threaded, as the fork needs
(the test process itself may have threads by then):
``python -m tests.integration.support.forked_template LOGFILE``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import warnings

import uvloop

import pool
from pool._fleet import _template
from tests.integration.routines import common as routines
from tests.integration.support.child import parent_of


async def main(logfile: str) -> dict[str, object]:
    logging.basicConfig(filename=logfile, level=logging.INFO, format="script %(name)s %(message)s")
    logging.getLogger("script").info("started")
    warnings.simplefilter("error")  # the script's own filters, not its workers'

    seen: dict[str, object] = {}
    server = socket.create_server(("127.0.0.1", 0))  # a web server's port, open when the pool starts
    port = server.getsockname()[1]
    first = pool.WorkerPool(spawn=2)
    await first.__aenter__()
    closed = False
    try:
        template = first.debug()
        seen["forked"] = template.template_forked
        seen["template_parent_is_us"] = parent_of(template.template_pid) == os.getpid()
        seen["workers_parent_is_template"] = {parent_of(pid) for pid in first.pids} == {template.template_pid}
        seen["add"] = await routines.add(2, 3)
        seen["program"] = (await routines.run_program("echo", "hi")).decode()
        await routines.log_warning("from the worker")
        seen["worker_holds_our_port"] = port in await routines.listening_tcp_ports()
        seen["deprecated"] = await routines.deprecated()
        async with pool.WorkerPool(spawn=1) as second:  # its template inherits the first pool's descriptors
            seen["second_forked"] = second.debug().template_forked
            seen["second_add"] = await routines.add(1, 1)
            await first.__aexit__(None, None, None)
            closed = True
            # 0: it left when told, not killed after a wait
            seen["first_template_exit"] = first.debug().template_exit_status
            seen["second_add_after"] = await routines.add(2, 2)
        _template.FORK_MAX_RSS_BYTES = 0  # a process too large to fork: a fresh interpreter instead
        async with pool.WorkerPool(spawn=1) as third:
            seen["large_forked"] = third.debug().template_forked
            seen["large_add"] = await routines.add(3, 3)
    finally:
        if not closed:
            await first.__aexit__(None, None, None)
        server.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(sys.argv[1]))))
