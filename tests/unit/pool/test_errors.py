"""Tests for pool._errors: the tree, pickling, and public module names."""

from __future__ import annotations

import pickle
import subprocess
import sys

import cloudpickle
import pytest

import balancer
import pool

ERRORS = [
    pool.PoolClosed("closed"),
    pool.WorkerBroken("lost", "INTERNAL"),
    pool.WorkerRejected("busy", "UNAVAILABLE"),
    pool.NoWorkersAvailable("none"),
    pool.CapacityTimeout("waited too long"),
    pool.AdmissionRejected("full", retry_after=2.5),
    pool.Deadlock("cycle"),
    pool.WorkflowHalted("an earlier call failed"),
    pool.WorkerStartError("did not start"),
    pool.WorkerInitError("initializer raised", "Traceback ...\nKeyError: 1\n"),
    pool.SerializationError("no pickle"),
    pool.ConfigError("LEAKYPOOL_X: expected an integer >= 0, got 'x'"),
    pool.RemoteTraceback("Traceback ..."),
]


class TestErrorTree:
    @pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
    @pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
    def test_error_should_survive_a_pickle_round_trip(self, error, dumps):
        """Test that type, message and attributes survive pickling (routines may return errors)."""
        restored = pickle.loads(dumps(error))
        assert type(restored) is type(error)
        assert str(restored) == str(error)
        assert vars(restored) == vars(error)

    @pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
    def test_error_should_pickle_by_its_public_module(self, error):
        """Test that errors live at pool.X, so pickles do not depend on private modules."""
        assert type(error).__module__ == "pool"
        assert b"pool._errors" not in pickle.dumps(error)

    def test_errors_should_share_one_root(self):
        """Test that ``except pool.PoolError`` catches every error leakypool raises itself."""
        for error in ERRORS:
            if not isinstance(error, pool.RemoteTraceback):
                assert isinstance(error, pool.PoolError), type(error)

    def test_no_workers_available_should_also_be_the_balancer_error(self):
        """Test that code catching balancer.NoWorkersAvailable catches the pool's too."""
        assert issubclass(pool.NoWorkersAvailable, balancer.NoWorkersAvailable)
        assert issubclass(pool.CapacityTimeout, pool.NoWorkersAvailable)

    def test_worker_init_error_should_show_the_initializer_traceback(self):
        """Test that a WorkerInitError is a WorkerStartError whose str and attribute carry the traceback."""
        error = pool.WorkerInitError("initializer raised", "KeyError: 'model'")
        assert isinstance(error, pool.WorkerStartError)
        assert error.traceback == "KeyError: 'model'"
        assert "KeyError: 'model'" in str(error)

    def test_builtin_bases_should_match_the_kind_of_error(self):
        """Test the builtin bases that let generic handlers catch our errors."""
        assert issubclass(pool.SerializationError, TypeError)
        assert issubclass(pool.ConfigError, ValueError)
        assert issubclass(pool.PoolClosed, RuntimeError)
        assert issubclass(pool.PoolWarning, UserWarning)

    def test_remote_traceback_should_render_the_worker_traceback(self):
        """Test that the cause prints the worker's traceback under a header."""
        assert "[worker traceback]\nTraceback ..." in str(pool.RemoteTraceback("Traceback ..."))


_BROKEN_PROCESS_POOL = """
import sys
{first}
import pool
assert "multiprocessing" not in sys.modules, "import pool loaded multiprocessing"
from concurrent.futures import BrokenExecutor
from concurrent.futures.process import BrokenProcessPool
for error in (pool.WorkerBroken, pool.WorkerInitError):
    assert issubclass(error, BrokenProcessPool) and issubclass(error, BrokenExecutor), error.__mro__
try:
    raise pool.WorkerBroken("lost")
except BrokenProcessPool:
    pass
import inspect, concurrent.futures.process as process
assert "exec_module" not in vars(process.__spec__.loader._loader if hasattr(process.__spec__.loader, "_loader") else process.__spec__.loader), "a real loader was patched"
assert inspect.getsource(process).startswith("#")  # the real loader still answers what else is asked
import importlib
importlib.import_module("concurrent.futures.thread")  # other imports go on
"""


@pytest.mark.parametrize(
    "first",
    [
        "",
        "import concurrent.futures.process",
        "import importlib.util; assert importlib.util.find_spec('concurrent.futures.process')",  # found, not loaded
    ],
)
def test_broken_worker_errors_are_broken_process_pools_without_importing_multiprocessing(first: str) -> None:
    """``import pool`` leaves multiprocessing (25 ms) out; code that names BrokenProcessPool still catches ours."""
    script = _BROKEN_PROCESS_POOL.format(first=first)
    if first.startswith("import concurrent"):  # imported before pool: the base is there, multiprocessing with it
        script = script.replace('assert "multiprocessing"', "# assert")
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
