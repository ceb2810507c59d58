"""The failure matrix: each fault at each stage ends in one documented error within a bound.

    stage                         fault    caller sees                        worker
    worker unpickles the task     error    SerializationError                 kept
    worker unpickles the task     exit     WorkerBroken                       replaced
    worker unpickles the task     crash    WorkerBroken                       replaced
    worker pickles the result     exit     WorkerBroken                       replaced
    worker pickles the result     crash    WorkerBroken                       replaced
    caller unpickles the result   error    SerializationError                 kept
    worker imports the routine    missing  SerializationError naming it       kept

(Faults at the caller's pickling, a routine that raises, unpicklable
results and exceptions, a killed worker and garbage on the port are in
test_faults.py.)
"""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

import pool
from tests.integration import faults, routines
from tests.integration.helpers import until_members

pytestmark = pytest.mark.integration

BOUND_S = 10.0
"""Every fault must end its call within this."""

MATRIX = [
    ("unpickle task", lambda: faults.take(faults.AtUnpickle("error", "worker")), pool.SerializationError, False),
    ("unpickle task", lambda: faults.take(faults.AtUnpickle("exit", "worker")), pool.WorkerBroken, True),
    ("unpickle task", lambda: faults.take(faults.AtUnpickle("crash", "worker")), pool.WorkerBroken, True),
    ("pickle result", lambda: faults.give("exit", "worker-pickle"), pool.WorkerBroken, True),
    ("pickle result", lambda: faults.give("crash", "worker-pickle"), pool.WorkerBroken, True),
    ("unpickle result", lambda: faults.give("error", "caller"), pool.SerializationError, False),
]


async def check(p: pool.WorkerPool, call, expected: type[BaseException], worker_dies: bool) -> None:
    """The one checking helper: the call fails with ``expected`` within the bound, and the pool recovers."""
    before = set(p.pids)
    t0 = time.perf_counter()
    with pytest.raises(expected):
        await asyncio.wait_for(call(), BOUND_S)
    assert time.perf_counter() - t0 < BOUND_S
    if worker_dies:
        await until_members(p, lambda p: len(p.workers) == 1 and not set(p.pids) & before, timeout=30)
    else:
        assert set(p.pids) == before
    assert await asyncio.wait_for(routines.add(1, 2), BOUND_S) == 3  # the pool still serves


@pytest.mark.parametrize(
    ("stage", "call", "expected", "worker_dies"),
    MATRIX,
    ids=[f"{stage}-{i}" for i, (stage, *_) in enumerate(MATRIX)],
)
async def test_fault_should_end_in_one_documented_error(stage, call, expected, worker_dies):
    async with pool.WorkerPool(spawn=1) as p:
        await check(p, call, expected, worker_dies)


async def test_routine_the_worker_cannot_import_should_fail_with_serialization_error_naming_it(tmp_path):
    (tmp_path / "caller_side_only.py").write_text("import pool\n\n@pool.routine\nasync def ghost():\n    return 1\n")
    async with pool.WorkerPool(spawn=1) as p:  # spawned before the module exists on its path
        sys.path.insert(0, str(tmp_path))
        try:
            import caller_side_only

            await check(p, caller_side_only.ghost, pool.SerializationError, False)
            with pytest.raises(pool.SerializationError, match="caller_side_only"):
                await caller_side_only.ghost()
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("caller_side_only", None)
