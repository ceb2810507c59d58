"""Issue 54 item 2: a rolling deploy of two versions of one module, with calls and jobs flowing through it.

Two directories hold two versions of ``deploymod``; old workers (build v1) import the first, new ones (build v2)
the second. An old dispatching process (build v1) runs calls and submits jobs, then leaves; a new one (build v2)
takes over the same SQLite store. Every call and job runs the version it was made for, none is lost, and the old
workers, once nothing pinned to v1 is left, idle out and exit by themselves (the leaky bucket's drain).
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest

import pool
from tests.integration.support.child import Child
from tests.integration.support.workers import clean_env

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[3]
WAIT_S = 60.0
OLD_IDLE_S = 4.0  # the old workers' --idle-timeout: they exit this long after their last call
ADDRESSES: dict[Child, str] = {}

MODULE = '''
import os

import pool

VERSION = {version!r}


@pool.routine
async def which(tag):
    """This module's version, the build the worker says it runs, and ``tag``."""
    return VERSION, os.environ.get("LEAKYPOOL_BUILD", ""), tag
'''


@asynccontextmanager
async def workers(directory: pathlib.Path, build: str, count: int, idle: float) -> AsyncIterator[list[Child]]:
    """``count`` standalone workers of ``build`` importing ``deploymod`` from ``directory``: their processes, each
    with the address its READY line gave (``ADDRESSES``)."""
    env = clean_env(LEAKYPOOL_BUILD=build, PYTHONPATH=os.pathsep.join([str(directory), str(ROOT)]))
    async with AsyncExitStack() as stack:
        children = []
        for _ in range(count):
            read_fd, write_fd = os.pipe()
            stack.callback(os.close, read_fd)
            args = [sys.executable, str(ROOT / "worker_main.py"), "--port", "0", "--ready-fd", str(write_fd)]
            args += ["--idle-timeout", str(idle)]
            try:
                child = await stack.enter_async_context(Child(args, env=env, pass_fds=(write_fd,), cwd=ROOT))
            finally:
                os.close(write_fd)
            line = await asyncio.wait_for(asyncio.to_thread(os.read, read_fd, 4096), WAIT_S)
            assert line.startswith(b"READY "), line
            ADDRESSES[child] = f"127.0.0.1:{json.loads(line[len(b'READY ') :])['port']}"
            children.append(child)
        yield children


@pytest.fixture
def deploymod(tmp_path: pathlib.Path):
    """Both versions on disk; this process imports the first (a routine crosses by reference: its name alone)."""
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "deploymod.py").write_text(MODULE.format(version=version))
    sys.path.insert(0, str(tmp_path / "v1"))
    try:
        import deploymod

        yield deploymod
    finally:
        sys.path.remove(str(tmp_path / "v1"))
        sys.modules.pop("deploymod", None)


async def test_a_rolling_deploy_should_run_every_call_and_job_on_the_version_it_was_made_for(tmp_path, deploymod):
    """Test calls and jobs through the deploy: old calls and pinned jobs on v1 (even those the new process runs),
    new calls, new jobs and unpinned old jobs on v2; nothing lost; the old workers exit by themselves once drained."""
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    later = pool.Queue("later", concurrency=4)  # paused while the old process runs: what it leaves to the new one
    async with (
        workers(tmp_path / "v1", "v1", 2, idle=OLD_IDLE_S) as old,
        workers(tmp_path / "v2", "v2", 2, idle=0) as new,
    ):
        discovery = [ADDRESSES[c] for c in old + new]
        async with pool.WorkerPool(
            discovery=pool.StaticDiscovery(discovery), store=store, build="v1", queue_depth=100
        ) as before:
            await before.wait_for_workers(4, timeout=WAIT_S)
            assert sorted(m.build for m in before.workers.values()) == ["v1", "v1", "v2", "v2"]
            await before.jobs.pause("later")
            calls = await asyncio.gather(*(deploymod.which(f"old call {i}") for i in range(40)))
            assert {c[:2] for c in calls} == {("v1", "v1")}
            ran_here = [await deploymod.which.submit(f"old job {i}") for i in range(10)]
            left_pinned = [await deploymod.which.options(queue=later).submit(f"old pinned {i}") for i in range(10)]
            left_unpinned = [
                await deploymod.which.options(queue=later, pinned=False).submit(f"old unpinned {i}") for i in range(10)
            ]
            for job in ran_here:
                assert (await job.result(timeout=WAIT_S))[:2] == ("v1", "v1")
            assert {job.build for job in left_pinned} == {"v1"} and {job.build for job in left_unpinned} == {""}
        async with pool.WorkerPool(
            discovery=pool.StaticDiscovery(discovery), store=store, build="v2", queue_depth=100
        ) as after:
            await after.wait_for_workers(4, timeout=WAIT_S)
            await after.jobs.resume("later")
            flowing = asyncio.gather(*(deploymod.which(f"new call {i}") for i in range(40)))
            new_jobs = [await deploymod.which.submit(f"new job {i}") for i in range(10)]
            assert {c[:2] for c in await flowing} == {("v2", "v2")}
            last_v1 = 0.0
            for job in left_pinned:
                found = await after.jobs.get(job.id)
                assert found is not None and (await found.result(timeout=WAIT_S))[:2] == ("v1", "v1")
                finished = (await found.refresh()).finished_at
                assert finished is not None
                last_v1 = max(last_v1, finished.timestamp())
            for job in left_unpinned + new_jobs:
                found = await after.jobs.get(job.id)
                assert found is not None and (await found.result(timeout=WAIT_S))[:2] == ("v2", "v2")
            assert (await after.jobs.counts()).get("succeeded") == 40  # none lost
            # Drained of everything pinned to v1, the old workers idle out and exit by themselves; the new stay.
            for child in old:
                code = await asyncio.wait_for(asyncio.to_thread(child.process.wait), WAIT_S)  # type: ignore[union-attr]
                assert code == 0
            assert time.time() >= last_v1 + OLD_IDLE_S * 0.9  # not before the last job pinned to v1 ended
            assert all(c.process.poll() is None for c in new)  # type: ignore[union-attr]
            assert {(await deploymod.which("after"))[:2] for _ in range(5)} == {("v2", "v2")}
