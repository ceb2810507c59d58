"""The routine `bench.soak.jobs` runs: it logs each execution's start and end, to count runs per job."""

from __future__ import annotations

import asyncio
import os
import time

import pool


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())  # one short O_APPEND write: lines from many processes never interleave
    finally:
        os.close(fd)


@pool.routine
async def soak_task(log: str, job_id: str, seconds: float) -> str:
    """Sleep ``seconds``, between a start line and an end line in ``log``."""
    _append(log, f"S {job_id} {time.time():.6f} {os.getpid()}\n")
    await asyncio.sleep(seconds)
    _append(log, f"E {job_id} {time.time():.6f} {os.getpid()}\n")
    return job_id
