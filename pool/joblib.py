"""The joblib backend ``"leakypool"``: joblib and scikit-learn's ``n_jobs`` on leakypool workers.

    import joblib, pool.joblib
    pool.joblib.register()
    with joblib.parallel_config(backend="leakypool", n_jobs=4):    # 4 local workers, reused
        GridSearchCV(SVC(), grid, n_jobs=-1).fit(X, y)
    with joblib.parallel_config(backend="leakypool", executor=ex): # an existing pool.Executor (LAN workers...)
        Parallel()(delayed(f)(x) for x in xs)

A joblib task (a batch of ``delayed`` calls) is a plain function: it runs
through a `pool.Executor`, so the leaky bucket, healing, recycling and LAN
workers come with it. Without ``executor=``, the backend keeps one executor
of ``n_jobs`` local workers, started on first use and reused by later
``Parallel`` calls of the same size (joblib tells a backend nothing when a
``parallel_config`` block ends, so, like loky's reusable executor, it lives
until `shutdown` or the interpreter exits). Work queues without limit, as
with joblib's own backends; joblib batches tiny tasks itself (auto-batching).

Nested parallelism: joblib code inside a task gets joblib's threading
backend (then sequential below it), in that worker: never a new process pool
per task, never a wait on the pool's own workers (no deadlock).

This module imports joblib (the extra ``leakypool[joblib]``); ``import pool``
never does.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from joblib import ParallelBackendBase, register_parallel_backend
from joblib._parallel_backends import AutoBatchingMixin, FallbackToBackend, SequentialBackend

from ._base import in_worker
from ._executor import submit_once
from ._pool import Executor

if TYPE_CHECKING:
    from multiprocessing.pool import ApplyResult

__all__ = ["BACKEND_NAME", "LeakypoolBackend", "register", "shutdown"]

BACKEND_NAME: Final[str] = "leakypool"
"""The name `register` gives the backend (``parallel_config(backend="leakypool")``)."""

_lock = threading.Lock()
_shared: Executor | None = None  # the reusable executor of local workers (n_jobs of them)
_shared_size = 0


def register(name: str = BACKEND_NAME) -> None:
    """Register the backend with joblib under ``name`` (default ``"leakypool"``); safe to call again."""
    register_parallel_backend(name, LeakypoolBackend)


def shutdown(wait: bool = True) -> None:
    """Close the reusable executor the backend started (its workers exit); the next use starts a new one."""
    global _shared, _shared_size
    with _lock:
        executor, _shared, _shared_size = _shared, None, 0
    if executor is not None:
        executor.shutdown(wait=wait, cancel_futures=True)


def _reusable(n_jobs: int) -> Executor:
    """The shared executor of ``n_jobs`` local workers: the one already running if it has that size."""
    global _shared, _shared_size
    with _lock:
        if _shared is not None and _shared_size == n_jobs:
            return _shared
        threads = max((os.cpu_count() or 1) // n_jobs, 1)  # as loky does: n_jobs workers share the CPUs
        # No grace at shutdown: what still runs then was given up (joblib aborted it), as loky kills its workers.
        executor = Executor(max_workers=n_jobs, shutdown_grace=0.0, initializer=_limit_threads, initargs=(threads,))
        old, _shared, _shared_size = _shared, executor, n_jobs
        current = _shared
    if old is not None:
        old.shutdown(wait=False, cancel_futures=True)
    return current


THREAD_VARIABLES: Final[tuple[str, ...]] = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""The thread pools of native libraries a worker of the reusable executor caps (joblib's list)."""

_limits: Any = None  # the worker's threadpoolctl limits, kept for its life


def _limit_threads(threads: int) -> None:
    """In each worker of the reusable executor: cap native thread pools at ``threads`` (no oversubscription).

    The variables cover libraries loaded later; threadpoolctl (scikit-learn's
    dependency) caps those loaded already (a worker forked from a process
    that imported numpy).
    """
    global _limits
    for variable in THREAD_VARIABLES:
        os.environ.setdefault(variable, str(threads))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    _limits = threadpool_limits(threads)


def _discard(executor: Executor) -> None:
    """Stop using ``executor`` (the shared one, with tasks still running): its workers go, the next use starts anew."""
    global _shared, _shared_size
    with _lock:
        if _shared is executor:
            _shared, _shared_size = None, 0
    executor.terminate_workers()


def _forget_in_child() -> None:
    """In a forked child, the parent's executor (its thread, its workers) is not ours: start afresh."""
    global _shared, _shared_size, _lock
    _shared, _shared_size, _lock = None, 0, threading.Lock()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_in_child)


class LeakypoolBackend(AutoBatchingMixin, ParallelBackendBase):
    """joblib's ``ParallelBackendBase`` over a `pool.Executor`.

    Args:
        executor: Run on this `pool.Executor` (its workers, LAN or local)
            instead of the backend's reusable one; ``n_jobs`` then only sizes
            joblib's batches (the executor's workers do the work).
        nesting_level, inner_max_num_threads: As joblib passes them.
    """

    supports_retrieve_callback = True
    supports_return_generator = True
    supports_timeout = True
    supports_inner_max_num_threads = False
    uses_threads = False
    supports_sharedmem = False
    default_n_jobs = 1

    def __init__(
        self,
        nesting_level: int | None = None,
        inner_max_num_threads: int | None = None,
        executor: Executor | None = None,
        **backend_kwargs: Any,
    ) -> None:
        super().__init__(nesting_level=nesting_level, inner_max_num_threads=inner_max_num_threads, **backend_kwargs)
        if executor is not None and not isinstance(executor, concurrent.futures.Executor):
            raise TypeError(f"executor: expected a pool.Executor, got {executor!r}")
        self._given = executor
        self._executor: Executor | None = None  # the given one or the shared one
        self._n_jobs = 0  # as configured for the current Parallel call
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._pending_lock = threading.Lock()

    def effective_n_jobs(self, n_jobs: int | None) -> int:
        """How many tasks run at once: ``n_jobs`` (``-1``: one per CPU, ``-2``: all but one...)."""
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning")
        if self._given is not None:
            given = self._given
            workers = given.max_workers if isinstance(given, Executor) else getattr(given, "_max_workers", None)
            return max(1, workers if isinstance(workers, int) else (n_jobs if n_jobs and n_jobs > 0 else 1))
        if n_jobs is None:
            return 1
        if n_jobs < 0:
            return max((os.cpu_count() or 1) + 1 + n_jobs, 1)
        return n_jobs

    def configure(
        self,
        n_jobs: int | None = 1,
        parallel: Any = None,
        prefer: str | None = None,
        require: str | None = None,
        **backend_kwargs: Any,
    ) -> int:
        """Pick the executor for this ``Parallel`` call; the number of tasks it runs at once."""
        n = self.effective_n_jobs(n_jobs)
        if in_worker() and self._given is None:
            n = 1  # joblib asked for "leakypool" inside a task: never a new pool per task
        if n == 1 and self._given is None:
            raise FallbackToBackend(SequentialBackend(nesting_level=self.nesting_level))
        self.parallel = parallel
        self._n_jobs = n
        self._executor = self._given if self._given is not None else _reusable(n)
        return n

    def submit(self, func: Callable[[], Any], callback: Callable[[Any], None] | None = None) -> Any:
        """Run one joblib task (a batch of calls) on a worker; its ``concurrent.futures.Future``."""
        if self._executor is None:
            raise RuntimeError("the leakypool backend was not configured (joblib calls configure first)")
        future = submit_once(self._executor, func)  # a batch carries its items: its worker keeps nothing of it
        with self._pending_lock:
            self._pending.add(future)
        future.add_done_callback(self._forget)
        if callback is not None:
            future.add_done_callback(callback)
        return future

    def apply_async(self, func: Callable[[], Any], callback: Callable[[Any], None] | None = None) -> Any:
        """The name joblib < 1.5 calls `submit` by; its future answers ``get`` too."""
        future = self.submit(func, callback)
        future.get = future.result  # joblib < 1.5 retrieves with .get(timeout)
        return future

    def retrieve_result_callback(self, out: concurrent.futures.Future[Any] | ApplyResult[Any]) -> Any:
        """The task's result (or its exception, raised: same type, the worker's traceback as its cause).

        joblib passes back what `submit` returned, a ``concurrent.futures.Future``;
        the base class also allows a multiprocessing ``ApplyResult``.
        """
        if isinstance(out, concurrent.futures.Future):
            return out.result()
        return out.get()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """A task raised or the call timed out: cancel what has not started; stop what runs, where we can.

        A running task is a plain call, which cannot be interrupted. On the
        backend's own executor its workers are let go (killed, as loky kills
        its workers) and later calls get a fresh executor at once; on an
        executor you gave, running tasks finish, unseen.
        """
        with self._pending_lock:
            pending, self._pending = self._pending, set()
        running = [future for future in pending if not future.cancel()]
        executor, self._executor = self._executor, None
        if running and executor is not None and executor is not self._given:
            _discard(executor)
        if ensure_ready and self._n_jobs:
            self._executor = self._given if self._given is not None else _reusable(self._n_jobs)

    def terminate(self) -> None:
        """The ``Parallel`` call ended: forget its batch statistics (the reusable executor stays up)."""
        self._executor = None
        self.reset_batch_stats()

    def _forget(self, future: concurrent.futures.Future[Any]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def __reduce__(self) -> Any:
        # Nested joblib code runs in the worker on the backend `get_nested_backend` names (threads,
        # then sequential), never on this one: a worker does not own the pool's executor.
        return (SequentialBackend, ())
