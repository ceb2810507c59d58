"""The failure matrix: each fault at each stage ends in one documented error within a bound.

    stage                         fault    caller sees                                 worker
    worker unpickles the task     error    SerializationError naming the arguments     kept
    worker unpickles the task     exit     WorkerBroken                                replaced
    worker unpickles the task     crash    WorkerBroken                                replaced
    worker pickles the result     exit     WorkerBroken                                replaced
    worker pickles the result     crash    WorkerBroken                                replaced
    caller unpickles the result   error    SerializationError naming the result        kept
    worker imports the routine    missing  SerializationError naming routine, module   kept

The fault objects are in faults.py (as CPython's
``test_concurrent_futures/test_deadlock.py``); one helper, `check`, checks
every cell. Faults at the caller's pickling, a routine that raises,
unpicklable results and exceptions, a killed worker and garbage on the
port are in test_faults.py.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.routines import faults, hooks
from tests.integration.support.helpers import HANG_S, until_members

pytestmark = pytest.mark.integration

BOUND_S = HANG_S
"""Every fault must end its call, and a dead worker be replaced, within this: a hang guard, not a pace.

What ends each call is an event (an Outcome, or the end of the dead worker's stream), and a dead
worker's replacement waits at most the first steps of RESPAWN_BACKOFF_S: a defect that loses the
event never ends the call, while a slow machine is seconds late.
"""

WORKER_ERROR = r"the arguments of take\(\) cannot be unpickled: FaultError: error while unpickling on the worker"
CALLER_ERROR = r"the result of give\(\) cannot be unpickled: FaultError: error while unpickling on the caller"
LOST = r"^lost worker "
STALL_S = 1.0
"""How long a worker's I/O loop stalls after accepting a call that kills it (the routine's thread does so at once).

It must stay below ACCEPT_TIMEOUT_S: over a unix socket the routine runs on that stalled loop, and a
longer stall has the silent worker passed over (a different path than the one under test)."""

MATRIX = [
    # (stage, fault, call, expected error, message pattern, the worker dies)
    (
        "worker-unpickles-task",
        "error",
        lambda: faults.take(faults.AtUnpickle("error", "worker")),
        pool.SerializationError,
        WORKER_ERROR,
        False,
    ),
    (
        "worker-unpickles-task",
        "exit",
        lambda: faults.take(faults.AtUnpickle("exit", "worker")),
        pool.WorkerBroken,
        LOST,
        True,
    ),
    (
        "worker-unpickles-task",
        "crash",
        lambda: faults.take(faults.AtUnpickle("crash", "worker")),
        pool.WorkerBroken,
        LOST,
        True,
    ),
    ("worker-pickles-result", "exit", lambda: faults.give("exit", "worker-pickle"), pool.WorkerBroken, LOST, True),
    ("worker-pickles-result", "crash", lambda: faults.give("crash", "worker-pickle"), pool.WorkerBroken, LOST, True),
    (
        "caller-unpickles-result",
        "error",
        lambda: faults.give("error", "caller"),
        pool.SerializationError,
        CALLER_ERROR,
        False,
    ),
]


async def check(p: pool.WorkerPool, call, expected: type[BaseException], match: str, worker_dies: bool) -> None:
    """The one checking helper: ``call()`` fails with ``expected`` (and nothing else) within the bound, and the pool recovers.

    A hang fails here as TimeoutError, an undocumented error as itself.
    """
    before = set(p.pids)
    with pytest.raises(expected, match=match):  # a hang fails here as TimeoutError
        await asyncio.wait_for(call(), BOUND_S)
    if worker_dies:  # replaced (after its back-off): a new pid, the old one gone
        await until_members(  # the pool's member is the replacement (not the dead one, not yet evicted)
            p,
            lambda p: len(p.pids) == 1 and [m.pid for m in p.workers.values()] == p.pids and not set(p.pids) & before,
            timeout=BOUND_S,
        )
    else:  # the same worker goes on
        assert set(p.pids) == before
    assert await asyncio.wait_for(routines.add(1, 2), BOUND_S) == 3  # the pool still serves


@pytest.mark.parametrize(
    ("stage", "fault", "call", "expected", "match", "worker_dies"),
    MATRIX,
    ids=[f"{stage}-{fault}" for stage, fault, *_ in MATRIX],
)
async def test_fault_should_end_in_one_documented_error(stage, fault, call, expected, match, worker_dies):
    """Test that ``fault`` at ``stage`` ends the call in ``expected`` within the bound and the pool serves on."""
    async with pool.WorkerPool(spawn=1) as p:
        await check(p, call, expected, match, worker_dies)


async def test_routine_the_worker_cannot_import_should_fail_with_serialization_error_naming_it(tmp_path):
    """Test that a routine whose module only the caller can import fails with SerializationError naming both."""
    (tmp_path / "caller_side_only.py").write_text("import pool\n\n@pool.routine\nasync def ghost():\n    return 1\n")
    async with pool.WorkerPool(spawn=1) as p:  # spawned (PYTHONPATH fixed) before the module is on the path
        sys.path.insert(0, str(tmp_path))
        try:
            import caller_side_only

            await check(
                p,
                caller_side_only.ghost,
                pool.SerializationError,
                r"routine ghost cannot be unpickled: ModuleNotFoundError: No module named 'caller_side_only'",
                worker_dies=False,
            )
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("caller_side_only", None)


@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_a_worker_that_dies_before_its_accept_left_should_be_broken_not_retried_elsewhere(tmp_path, transport):
    """Test that a call whose worker died in its first step, before its Accept left, is WorkerBroken and ran once.

    On unix the Accept is held for the outcome; over TCP (gRPC) it is sent at once, but the routine
    starts at the same time (the hook stalls the worker's I/O loop so that it kills the worker
    first). Either way the Call had left, so the worker may have run it: the pool must not offer
    it to the other worker.
    """
    stall = hooks.StallAfterAccepting("die_at_once", STALL_S)
    async with pool.WorkerPool(spawn=2, local_transport=transport, backpressure=stall) as p:
        await asyncio.gather(*(routines.add(1, 2) for _ in range(4)))  # both workers import routines.py now
        with pytest.raises(pool.WorkerBroken, match=LOST):
            await asyncio.wait_for(routines.die_at_once(str(tmp_path), "once"), BOUND_S)
        assert routines.executions(str(tmp_path), "once") == (1, 0)
        assert await asyncio.wait_for(routines.add(1, 2), BOUND_S) == 3  # the pool still serves
        await until_members(p, lambda p: len(p.pids) == 2, timeout=BOUND_S)
