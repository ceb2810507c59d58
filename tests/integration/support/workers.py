"""Standalone workers (``worker_main.py``) for tests: start, read READY, stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable

import pool
from tests.integration.support.child import Child

WORKER = [sys.executable, "worker_main.py"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKYPOOL_")}
    env.update(extra)
    return env


class Worker:
    """A running standalone worker: its Child process and what its READY line said."""

    def __init__(self, child: Child, info: dict[str, object]) -> None:
        self.child = child
        self.info = info
        self.uid = str(info["uid"])
        self.port = int(info["port"])  # type: ignore[arg-type]
        self.pid = int(info["pid"])  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def worker(
    *flags: str, wrap: Callable[[list[str]], list[str]] = lambda a: a, stderr: int | None = None
) -> AsyncIterator[Worker]:
    """Start ``worker_main.py *flags``; yield once it is READY; kill and reap it on exit.

    ``wrap`` turns the command into another (e.g. to run it on a netns host).
    """
    read_fd, write_fd = os.pipe()
    args = wrap([*WORKER, *flags, "--ready-fd", str(write_fd)])
    try:
        child = Child(args, env=clean_env(), pass_fds=(write_fd,), stderr=stderr)
        async with child:
            os.close(write_fd)
            write_fd = -1
            line = await asyncio.wait_for(asyncio.to_thread(_read_line, read_fd), 60)
            assert line.startswith("READY "), f"worker did not start: {line!r}"
            yield Worker(child, json.loads(line[len("READY ") :]))
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def _read_line(fd: int) -> str:
    with open(fd, closefd=False) as f:
        return f.readline().strip()


def static(w: Worker, address: str | None = None) -> pool.StaticDiscovery:
    """A discovery announcing the standalone worker ``w`` as it is (no probe): at ``address``, or its TCP port."""
    where = address or f"127.0.0.1:{w.port}"
    return pool.StaticDiscovery(workers=[pool.WorkerMetadata(uid=uuid.UUID(w.uid), address=where)])
