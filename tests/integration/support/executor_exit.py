"""A script that submits work and ends without ``shutdown`` (the work must still finish: the standard library's
behaviour). Run as ``python -m tests.integration.support.executor_exit PATH``; the call writes PATH."""

from __future__ import annotations

import sys

import pool


def mark(path: str) -> None:
    with open(path, "w") as f:
        f.write("done")


if __name__ == "__main__":
    executor = pool.Executor(1)
    executor.submit(mark, sys.argv[1])
