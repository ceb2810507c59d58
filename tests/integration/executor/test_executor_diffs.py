"""pool.Executor where the standard library's ProcessPoolExecutor behaves otherwise (issue 42, differences 1-8).

Each test failed before its fix: a migrating user met each of these.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import os
import subprocess
import sys
from concurrent.futures.process import BrokenProcessPool

import pytest

import pool
from tests.integration.routines import executor_calls as calls

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        ("exit", SystemExit),
        ("interrupt", KeyboardInterrupt),
        ("stop", calls.Stop),
        ("cancelled", asyncio.CancelledError),
    ],
)
def test_a_base_exception_the_function_raises_should_be_its_futures_outcome_only(kind, error):
    """Test 1 and 2: SystemExit, KeyboardInterrupt, CancelledError ... end that future; the executor goes on."""
    with pool.Executor(1) as ex:
        beside = [ex.submit(calls.square, i) for i in range(4)]
        failed = ex.submit(calls.raise_base, kind)
        cf.wait([failed], timeout=60)
        assert failed.done() and isinstance(failed.exception(), error)
        after = ex.submit(calls.square, 5)  # the next submit neither raises PoolClosed nor hangs
        assert [f.result(timeout=60) for f in beside] == [0, 1, 4, 9]
        assert after.result(timeout=60) == 25


def test_work_submitted_without_shutdown_should_finish_at_exit(tmp_path):
    """Test 3: a script that submits and ends (no shutdown, no with) still gets its work done, as the standard library's."""
    path = tmp_path / "done"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    run = subprocess.run(
        [sys.executable, "-m", "tests.integration.support.executor_exit", str(path)],
        cwd=root,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    assert path.read_text() == "done"


def test_a_routines_options_should_hold_through_submit_and_map():
    """Test 4: a routine's timeout holds when the executor runs it (a hard limit: TimeoutError, not a long sleep)."""
    with pool.Executor(1) as ex:
        timed = ex.submit(calls.nap.options(timeout=0.5), 60)
        cf.wait([timed], timeout=45)
        assert timed.done() and isinstance(timed.exception(), TimeoutError)
        mapped = ex.map(calls.nap.options(timeout=0.5), [60])
        with pytest.raises(TimeoutError):
            next(mapped)  # (the map's own timeout is None: this is the routine's)
        assert ex.submit(calls.square, 3).result(timeout=60) == 9


def test_worker_errors_should_be_the_standard_librarys_broken_pool():
    """Test 7: migrated ``except BrokenProcessPool:`` clauses catch a lost worker and a raising initializer."""
    assert issubclass(pool.WorkerBroken, BrokenProcessPool)
    assert issubclass(pool.WorkerInitError, BrokenProcessPool)
    with pool.Executor(1) as ex:
        with pytest.raises(BrokenProcessPool):
            ex.submit(calls.die).result(timeout=60)


def test_errors_should_name_the_users_function_not_the_executors():
    """Test 8: messages name the function, not the routine an executor runs it through (``_apply()``)."""
    import threading

    with pool.Executor(1) as ex:
        argument = ex.submit(calls.square, threading.Lock()).exception(timeout=60)
        result = ex.submit(calls.unpicklable_result).exception(timeout=60)
    assert "argument 1 of square()" in str(argument)
    assert "the result of unpicklable_result()" in str(result)


def test_recycling_should_log_no_startup_warning_at_shutdown(capfd):
    """Test 8: max_tasks_per_child's last replacements, stopped as the executor shuts down, warn of nothing."""
    with pool.Executor(2, max_tasks_per_child=2) as ex:
        assert len([f.result(timeout=60) for f in [ex.submit(calls.pid) for _ in range(20)]]) == 20
    assert "stopped waiting for this worker to start" not in capfd.readouterr().err
