"""``pool.Executor``: a ``concurrent.futures.Executor`` for plain synchronous code, on a pool it runs itself.

    Executor(...)          builds the WorkerPool now (a bad option fails here)
      first submit ──────> starts a thread with its own event loop: ``async with pool:``
                           attaches the executor's `Feed` to it (see `_feed`)
      shutdown(wait) ────> the feed drains, the pool closes, the thread ends (joined when ``wait``)

Workers start lazily, on the first ``submit``, as the standard library's
pools start theirs. A pool that cannot start (a worker that does not come
up, an initializer that raises) ends every future the executor accepted,
and every later one, with that error instead of leaving them waiting.

`submit_once` is the joblib backend's ``submit``: a batch's worker keeps nothing of it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final

from .._base import public
from .._errors import PoolClosed
from .._executor import Feed, FeedExecutor, interpreter_exiting
from ._worker_pool import WorkerPool, attach_feed, finishing

UNBOUNDED_QUEUE_DEPTH: Final[int] = 2**62
"""The pool's ``queue_depth`` when no ``queue_depth`` is given: calls the executor hands over never find it full."""

NO_DISPATCH_DEADLINE_S: Final[float] = 10 * 365 * 24 * 3600.0
"""The pool's ``dispatch_deadline`` when none is given (ten years, in seconds): work waits its turn, however long."""


class Executor(FeedExecutor):
    """A ``concurrent.futures.Executor`` whose work runs on leakypool workers.

    Behaves as the standard library's executors say (``submit``, ``map``,
    ``shutdown``, ``with``, the same errors and messages) and adds what a
    `WorkerPool` does: a lost worker fails only its own futures
    (`pool.WorkerBroken`) and is replaced while the executor goes on;
    ``**pool_options`` (discovery, balancer, backpressure, ...) let it run
    on LAN workers. It runs its `WorkerPool` on an event loop in a thread it
    owns, from the first ``submit`` until ``shutdown``.

    Like the standard library's pools it queues work without limit: the
    executor's own line takes any number of calls and hands its pool a few
    per worker at a time (the pool gets ``queue_depth`` 2**62 and a ten-year
    ``dispatch_deadline``, so a long wait is never `NoWorkersAvailable` or
    `CapacityTimeout`). Given ``queue_depth``, every call goes to the pool's
    admission at once and a refused one ends its future in
    `pool.AdmissionRejected`. Either way a future can be cancelled until its
    worker begins the call (docs/from-concurrent-futures.md).

    Args:
        max_workers: Local worker processes (WorkerPool's ``spawn``); default
            one per CPU.
        initializer: Called once in each worker before its first call.
        initargs: Its arguments.
        max_tasks_per_child: A worker exits after this many calls and is
            replaced (WorkerPool's ``max_tasks_per_worker``).
        **pool_options: WorkerPool's other keyword arguments.

    Raises:
        ValueError: ``max_workers`` or ``max_tasks_per_child`` < 1.
        TypeError: ``initializer`` is not callable, or an unknown option.
        ConfigError: a bad pool option.
    """

    def __init__(
        self,
        max_workers: int | None = None,
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
        max_tasks_per_child: int | None = None,
        **pool_options: Any,
    ) -> None:
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if max_tasks_per_child is not None:
            if not isinstance(max_tasks_per_child, int) or isinstance(max_tasks_per_child, bool):
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
        if "spawn" in pool_options:
            raise TypeError("Executor() takes max_workers, not spawn")
        bounded = pool_options.get("queue_depth") is not None
        if not bounded:
            pool_options["queue_depth"] = UNBOUNDED_QUEUE_DEPTH
            pool_options.setdefault("dispatch_deadline", NO_DISPATCH_DEADLINE_S)
        if initializer is not None:  # forwarded only when given
            pool_options.update(initializer=initializer, initargs=tuple(initargs))
        if max_tasks_per_child is not None:
            pool_options["max_tasks_per_worker"] = max_tasks_per_child
        spawn = max_workers if max_workers is not None else os.cpu_count() or 1
        self._max_workers = spawn
        super().__init__(Feed(direct=bounded))
        self._runtime = _Runtime(WorkerPool(spawn, **pool_options), self._feed)
        # Collected unshut: let it close by itself (never block the collecting thread); at exit: wait for it.
        self._finalizer = weakref.finalize(self, self._runtime.stop, False)
        _RUNNING.add(self._runtime)

    def _start(self) -> None:
        self._runtime.start()

    def _stop(self, wait: bool) -> None:
        self._runtime.stop(wait)

    @property
    def max_workers(self) -> int:
        """How many workers the pool runs (``max_workers``, or one per CPU)."""
        return self._max_workers

    def terminate_workers(self) -> None:
        """Shut down now: cancel what has not started and close the pool without waiting for what runs.

        As Python 3.14's ``ProcessPoolExecutor.terminate_workers``: for work
        given up (``pool.joblib`` after a timeout or an error), the pool closes
        at once, its workers are stopped (within its ``shutdown_grace``) and
        the running calls' futures end in an error.
        """
        with self._shutdown_lock:
            self._shut = True
        self._feed.cancel_pending()
        self._runtime.stop(False, now=True)

    def __repr__(self) -> str:
        return super().__repr__().replace("[", f"[{self._max_workers} workers, ", 1)


class _Runtime:
    """The thread, its loop and the pool of one `Executor` (held apart so the executor can be collected)."""

    def __init__(self, pool: WorkerPool, feed: Feed) -> None:
        self._pool = pool
        self._feed = feed
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._now = False  # close without waiting for the calls handed to the pool
        self._wake: Callable[[], object] | None = None

    def start(self) -> None:
        """Start the thread (once; the caller holds the executor's shutdown lock).

        Its loop is made here, on the caller's thread: importing uvloop imports
        `concurrent.futures.thread`, which registers an exit hook, and a thread
        doing that after the interpreter began to exit dies there (work
        submitted right before a script ends would be lost).
        """
        if self._thread is not None:
            return
        loop = _new_loop()
        self._thread = threading.Thread(target=self._main, args=(loop,), name="leakypool-executor", daemon=True)
        self._thread.start()

    def stop(self, wait: bool, *, now: bool = False) -> None:
        """Let the pool close once its work is done (``now``: at once); with ``wait``, until the thread has ended."""
        self._stopping = True
        self._now = self._now or now
        wake = self._wake
        if wake is not None:
            try:
                wake()
            except RuntimeError:
                pass  # the loop already closed
        thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # a loop that dies fails its futures, never leaves them waiting
            self._feed.fail(PoolClosed(f"the executor's event loop ended: {exc!r}"), for_good=True)
            raise
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        try:
            await self._pool.__aenter__()
        except Exception as exc:  # noqa: BLE001  # whatever stopped the pool starting ends its futures
            self._feed.fail(exc, for_good=True)
            return
        try:
            loop = asyncio.get_running_loop()
            stopping = asyncio.Event()
            self._wake = lambda: loop.call_soon_threadsafe(stopping.set)
            attach_feed(self._pool, self._feed)
            if not self._stopping:
                await stopping.wait()
            if not self._now:
                finishing(self._pool)  # no crash back-off while its calls remain
                await self._feed.drained()
        finally:
            self._wake = None
            await self._pool.__aexit__(None, None, None)


_RUNNING: weakref.WeakSet[_Runtime] = weakref.WeakSet()
"""Runtimes of executors not yet shut down: at interpreter exit each is closed and waited for."""


def _close_all_at_exit() -> None:
    interpreter_exiting()
    for runtime in list(_RUNNING):
        runtime.stop(True)


# As concurrent.futures registers its own: run as the main thread ends, before the interpreter starts to
# tear down (an atexit hook runs later, after threads that import or register hooks can no longer).
threading._register_atexit(_close_all_at_exit)  # type: ignore[attr-defined]


def _new_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where uvloop is installed (a default dependency), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


public(Executor)
