"""The joblib backend "leakypool" with the real joblib and scikit-learn, on real workers."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import time

import pytest

joblib = pytest.importorskip("joblib")
pytest.importorskip("sklearn")

from joblib import Parallel, delayed, parallel_config
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.svm import SVC

import pool
import pool.joblib
from tests.integration.routines import joblib_tasks as tasks

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def backend():
    """The backend registered; its reusable executor closed after each test (no worker outlives it)."""
    pool.joblib.register()
    yield
    pool.joblib.shutdown()


def test_parallel_should_give_every_result_in_order():
    with parallel_config(backend="leakypool", n_jobs=2):
        assert Parallel()(delayed(tasks.square)(i) for i in range(2000)) == [i * i for i in range(2000)]


def test_a_worker_should_keep_no_batch_past_its_call():
    # A batch is a callable that carries its items. Kept in the worker's cache of callables (bounded by
    # their pickles' bytes, and a pickle loads into many times its size), a worker grew from 55 to 131 MiB
    # over 13 calls of 100,000 items, and each call faulted ~2,800 fresh pages in.
    with parallel_config(backend="leakypool", n_jobs=2):
        Parallel()(delayed(tasks.square)(i) for i in range(20_000))
        kept = Parallel(batch_size=1)(delayed(tasks.kept_callables)() for _ in range(8))
    assert all("BatchedCalls" not in types for types in kept), kept


def test_tasks_should_run_in_worker_processes():
    with parallel_config(backend="leakypool", n_jobs=2):
        pids = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(20)))
    assert os.getpid() not in pids


def test_the_reusable_executor_should_be_kept_across_parallel_calls_of_the_same_size():
    with parallel_config(backend="leakypool", n_jobs=2):
        first = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(8)))
        second = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(8)))
    assert first & second  # the same workers served both


@pytest.mark.parametrize("return_as", ["generator", "generator_unordered"])
def test_generators_should_yield_every_result(return_as):
    with parallel_config(backend="leakypool", n_jobs=2):
        results = Parallel(return_as=return_as)(delayed(tasks.square)(i) for i in range(100))
        values = list(results)
    expected = [i * i for i in range(100)]
    assert values == expected if return_as == "generator" else sorted(values) == expected


def test_a_task_exception_should_surface_with_its_own_type_and_the_worker_traceback():
    with parallel_config(backend="leakypool", n_jobs=2), pytest.raises(KeyError, match="item 7") as info:
        Parallel(batch_size=1)(delayed(tasks.fail_at)(i, 7) for i in range(20))
    assert "joblib_tasks.py" in str(info.value.__cause__)


def test_nested_parallel_should_run_inside_the_worker_on_threads():
    with parallel_config(backend="leakypool", n_jobs=2):
        results = Parallel(batch_size=1)(delayed(tasks.nested)(5) for _ in range(4))
    assert all(values == [0, 1, 4, 9, 16] for values, _ in results)
    assert {backend for _, backend in results} <= {"ThreadingBackend", "SequentialBackend"}


def test_an_existing_executor_should_run_the_tasks():
    with pool.Executor(max_workers=2) as ex, parallel_config(backend="leakypool", executor=ex):
        pids = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(10)))
        workers = set(ex.map(tasks.pid, range(10)))
    assert pids <= workers | pids and os.getpid() not in pids


def test_a_timeout_should_end_the_parallel_call():
    with (
        parallel_config(backend="leakypool", n_jobs=2),
        pytest.raises((TimeoutError, cf.TimeoutError, multiprocessing.TimeoutError)),
    ):  # joblib's own
        Parallel(timeout=0.5, batch_size=1)(delayed(tasks.slow)(s) for s in (0.0, 5.0, 5.0))


def test_a_lost_worker_should_end_the_call_with_worker_broken_naming_it():
    with parallel_config(backend="leakypool", n_jobs=2), pytest.raises(pool.WorkerBroken, match="worker"):
        Parallel(batch_size=1)(delayed(tasks.die if i == 3 else tasks.square)(i) for i in range(6))
    with parallel_config(backend="leakypool", n_jobs=2):  # the pool healed: the next call runs
        assert Parallel()(delayed(tasks.square)(i) for i in range(10)) == [i * i for i in range(10)]


def test_cross_val_score_should_match_the_default_backend():
    X, y = load_digits(return_X_y=True)
    expected = cross_val_score(SVC(), X, y, cv=3, n_jobs=1)
    with parallel_config(backend="leakypool", n_jobs=2):
        ours = cross_val_score(SVC(), X, y, cv=3, n_jobs=2)
    assert list(ours) == list(expected)


def test_grid_search_should_match_the_default_backend():
    X, y = load_digits(return_X_y=True)
    grid = {"C": [1, 10], "gamma": ["scale", 0.001]}
    expected = GridSearchCV(SVC(), grid, cv=3, n_jobs=1).fit(X, y)
    with parallel_config(backend="leakypool", n_jobs=2):
        ours = GridSearchCV(SVC(), grid, cv=3, n_jobs=-1).fit(X, y)
    assert ours.best_params_ == expected.best_params_
    assert list(ours.cv_results_["mean_test_score"]) == list(expected.cv_results_["mean_test_score"])


def test_shutdown_should_close_the_workers_and_a_later_call_should_start_new_ones():
    with parallel_config(backend="leakypool", n_jobs=2):
        first = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(4)))
        pool.joblib.shutdown()
        second = set(Parallel(batch_size=1)(delayed(tasks.pid)() for _ in range(4)))
    assert not first & second


def test_n_jobs_1_should_run_sequentially_here():
    with parallel_config(backend="leakypool", n_jobs=1):
        assert set(Parallel()(delayed(tasks.pid)() for _ in range(3))) == {os.getpid()}


def test_the_backend_should_refuse_an_executor_that_is_not_one():
    with pytest.raises(TypeError, match="executor"):
        pool.joblib.LeakypoolBackend(executor=object())


def test_a_task_asking_for_leakypool_itself_should_run_sequentially_in_its_worker():
    with parallel_config(backend="leakypool", n_jobs=2):
        (result,) = Parallel()(delayed(tasks.nested_leakypool)(4) for _ in range(1))
    assert result == ["SequentialBackend", 1, True]


# Forking with the executor's thread alive is the point (a user's code that forks): Python 3.12+ warns that the
# process is multi-threaded (a warning turned into an error is dropped there, so only `-W always` shows it).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
def test_a_forked_child_should_not_reuse_the_parents_executor():
    """Test that a process forked after the backend started its executor starts one of its own (no hang)."""
    with parallel_config(backend="leakypool", n_jobs=2):
        Parallel()(delayed(tasks.square)(i) for i in range(4))  # the parent's executor is up
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through its exit status
            status = 1
            try:
                status = 0 if Parallel()(delayed(tasks.square)(i) for i in range(4)) == [0, 1, 4, 9] else 1
                pool.joblib.shutdown()
            finally:
                os._exit(status)
        deadline = time.monotonic() + 60
        while (waited := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
            time.sleep(0.05)  # (os.waitpid has no timeout; bounded above)
        if waited == (0, 0):
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child hung on its parent's executor")
        assert os.waitstatus_to_exitcode(waited[1]) == 0


def test_after_a_timeout_the_next_call_should_not_wait_for_the_abandoned_tasks():
    """Test that tasks given up at a timeout (plain calls: they cannot be stopped) do not hold the next call up."""
    with parallel_config(backend="leakypool", n_jobs=2):
        with pytest.raises((TimeoutError, multiprocessing.TimeoutError)):
            Parallel(timeout=0.5, batch_size=1)(delayed(tasks.slow)(60) for _ in range(4))
        results = Parallel(timeout=30, batch_size=1)(delayed(tasks.square)(i) for i in range(4))
    assert results == [0, 1, 4, 9]
