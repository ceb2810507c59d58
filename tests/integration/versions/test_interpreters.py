"""Issue 54 item 1: code pickled by value runs only on the Python that made it; nothing crashes a worker.

A worker of another Python (another venv of this checkout: CI's second full run has the first run's, a
developer's machine whichever it holds) serves one pool beside workers of this one. Calls whose code is
by reference run on either; calls whose code travels by value (a closure made here) go only to workers of
this Python, or end at once in `VersionMismatch` naming both; a value by value coming back from the other
Python is not loaded. Skipped, saying why, where no other Python's venv is there.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

import pool
from pool._transport._wire import INTERPRETER
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.workers import clean_env

pytestmark = pytest.mark.integration

ROOT = pathlib.Path(__file__).resolve().parents[3]
WAIT_S = 60.0


def other_python() -> tuple[str, str] | None:
    """(path, "3.X") of a venv of this checkout whose Python is another minor version, with leakypool importable."""
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for venv in sorted(ROOT.glob(".venv*")):
        python = venv / "bin" / "python"
        if not python.exists():
            continue
        probe = subprocess.run(
            [str(python), "-c", "import sys, grpc, pool; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=False,
        )
        version = probe.stdout.strip()
        if probe.returncode == 0 and version and version != mine:
            return str(python), version
    return None


OTHER = other_python()
needs_other_python = pytest.mark.skipif(
    OTHER is None, reason="no venv of another Python in this checkout (CI's second full run has one)"
)


@asynccontextmanager
async def other_worker() -> AsyncIterator[tuple[dict, str]]:
    """A ``leakypool-worker --port 0`` of the other Python (the user's secret, as this pool's); its READY info."""
    assert OTHER is not None
    read_fd, write_fd = os.pipe()
    args = [OTHER[0], str(ROOT / "worker_main.py"), "--port", "0", "--ready-fd", str(write_fd)]
    try:
        async with Child(args, env=clean_env(), pass_fds=(write_fd,), cwd=ROOT) as child:
            os.close(write_fd)
            write_fd = -1
            line = os.read(read_fd, 4096).decode()
            assert line.startswith("READY "), line
            info = json.loads(line[len("READY ") :])
            yield info, f"127.0.0.1:{info['port']}"
            child.process.terminate()
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def closure_routine(n: int) -> pool.Routine:
    """A routine made here, at run time: it can only travel by value (this Python's bytecode)."""

    async def add_n(x):
        return x + n

    add_n.__module__ = "__main__"
    return pool.routine(add_n)


@needs_other_python
async def test_code_by_value_should_run_only_on_its_own_python_and_by_reference_on_either():
    """Test a pool with a worker of this Python and one of another: by-reference calls run on both; a closure
    runs only where its bytecode came from, however often it is called; the other worker never crashes."""
    assert OTHER is not None
    async with other_worker() as (info, address):
        assert info["interpreter"] != INTERPRETER
        discovery = pool.StaticDiscovery([address])  # probed: its State says its Python
        async with pool.WorkerPool(spawn=1, discovery=discovery) as p:
            await p.wait_for_workers(2, timeout=WAIT_S)
            versions = {await routines.python_version() for _ in range(40)}
            assert versions == {f"{sys.version_info[0]}.{sys.version_info[1]}", OTHER[1]}  # round robin: both
            by_value = closure_routine(10)
            assert [await by_value(i) for i in range(20)] == [i + 10 for i in range(20)]
            assert await routines.python_version() in versions  # the other worker is still there
            assert uuid.UUID(info["uid"]) in p.workers


@needs_other_python
async def test_a_pool_with_only_another_python_should_end_a_call_by_value_at_once_naming_both():
    """Test VersionMismatch: named, at once (no wait in the line), even when the worker's record says nothing
    of its Python (it declines the call itself, and the pool learns why)."""
    assert OTHER is not None
    async with other_worker() as (info, address):
        for discovery in (
            pool.StaticDiscovery([address]),  # probed: the pool knows its Python
            pool.StaticDiscovery(workers=[pool.WorkerMetadata(uid=uuid.UUID(info["uid"]), address=address)]),
        ):
            async with pool.WorkerPool(discovery=discovery, queue_depth=10) as p:
                await p.wait_for_workers(1, timeout=WAIT_S)
                assert await routines.add(1, 2) == 3  # by reference: fine
                with pytest.raises(pool.VersionMismatch) as caught:
                    await closure_routine(1)(1)
                message = str(caught.value)
                assert INTERPRETER in message and "no worker of the pool runs" in message
                assert await routines.add(2, 3) == 5  # the worker is unharmed


@needs_other_python
async def test_a_value_by_value_from_another_python_should_not_be_loaded():
    """Test the way back: a closure the other Python's worker returns is refused here, not unpickled."""
    assert OTHER is not None
    async with other_worker() as (_, address):
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([address])) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            with pytest.raises(pool.SerializationError, match=rf"pickled by value by cpython-{OTHER[1]}"):
                await routines.make_adder(1)


async def test_a_call_by_value_should_say_its_python_and_run_where_it_matches():
    """Test the tag itself, on this Python's workers alone (no other venv needed): a closure's call carries this
    interpreter, a call by reference none, and a closure coming back from a worker of this Python loads."""
    by_value = closure_routine(5)
    assert by_value.task((1,), {}).interpreter == INTERPRETER
    assert routines.add.task((1, 2), {}).interpreter == ""
    assert routines.add.task((lambda: 1,), {}).interpreter == INTERPRETER  # code among the arguments
    async with pool.WorkerPool(spawn=1):
        assert await by_value(1) == 6
        assert (await routines.make_adder(2))(3) == 5


@needs_other_python
async def test_a_stored_job_by_value_should_end_at_its_deadline_naming_its_python_when_no_worker_runs_it(tmp_path):
    """Test a job whose code travels by value in a pool served only by another Python: it is never sent there, and
    ends at its dispatch deadline in VersionMismatch naming the version (never a silent CapacityTimeout); a job by
    reference runs there."""
    assert OTHER is not None
    async with other_worker() as (_, address):
        store = f"sqlite:///{tmp_path / 'jobs.db'}"
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([address]), store=store) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            job = await closure_routine(1).options(dispatch_deadline=1.0).submit(1)
            with pytest.raises(pool.VersionMismatch, match=rf"found no worker of its version .*{INTERPRETER}"):
                await job.result(timeout=WAIT_S)
            assert await (await routines.add.submit(2, 3)).result(timeout=WAIT_S) == 5
