"""Runs `by_value.check` on a pool whose template is a fork of this process; prints JSON (test_by_value runs it).

A script, so the process is single-threaded as the fork needs:
``python -m tests.integration.support.by_value_forked DIRECTORY``.
"""

from __future__ import annotations

import json
import sys

import uvloop

import pool
from tests.integration.support import by_value


async def main(directory: str) -> dict[str, object]:
    from pathlib import Path

    module = by_value.load(Path(directory))  # before the pool: the template forks with it loaded
    async with pool.WorkerPool(spawn=1) as p:
        seen = {"forked": p.debug().template_forked}
        seen.update(await by_value.check(module))
    return seen


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(sys.argv[1]))))
