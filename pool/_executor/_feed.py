"""The ``concurrent.futures`` face of a pool: its waiting line, ``submit``/``map``/``shutdown``, ``WorkerPool.executor()``.

Each submitted callable runs through one routine (`_apply`, see `_calls`):
    submit(fn, *args)  (any thread)
        │ pickle now (a bad argument fails its future, as in the standard library)
        v
    Feed: a deque without limit ──runners, at most a window in flight──> WorkerPool.call(_apply task)
        │ pending: cancel() works                    running: the pool's own admission, queue and healing
        v
    concurrent.futures.Future: PENDING until its worker says the call began (Accept or Started), then
                               RUNNING; result, or whatever the function raised (BaseExceptions too; the
                               remote traceback as __cause__)

The window (`IN_FLIGHT_PER_WORKER` per worker) keeps the pool's own queue short: a long line waits here,
as work items, not as asyncio tasks in the pool. A future stays PENDING (``cancel()`` works) while its call
waits here, in the pool's line or in a worker's, and turns RUNNING when its worker says it began
(`CallRecord.started`). Cancelling it before that takes the call back: its runner is cancelled, which cancels
the call wherever it waits (a worker drops one from its line unstarted). A cancel that crosses the
worker's word on the wire comes too late: the call runs, and its result is dropped.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import functools
import sys
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, Final

from .._call import CallRecord
from .._config import PLAIN_PREFETCH
from .._errors import NoWorkersAvailable, PoolClosed, SerializationError, WorkerBroken
from .._routine import Routine
from .._transport import wire
from ._calls import Shipped, _apply, _apply_chunk, name_of, runner_for, task_for
from ._map import Chunk, batched, check_map_arguments, ordered_results, single

IN_FLIGHT_PER_WORKER: Final[int] = 1 + PLAIN_PREFETCH
"""Calls an executor keeps handed to its pool per worker, by default: one running, the rest in the worker's line."""

BUSY_RETRY_S: Final[float] = 0.05
"""A view over a pool without a queue (``queue_depth=0``) retries a call no worker took after at most this long."""


def _fail(future: cf.Future[Any], error: BaseException) -> None:
    if future.set_running_or_notify_cancel():
        future.set_exception(error)


class _Work:
    """One submitted call: its future stays PENDING (``cancel()`` works) until its worker says it began."""

    __slots__ = ("future", "runner", "started", "task", "withdrawn")

    def __init__(self, future: cf.Future[Any], task: CallRecord) -> None:
        self.future = future
        self.task = task
        self.runner: asyncio.Task[Any] | None = None  # the runner awaiting its call, while it does
        self.started: bool | None = None  # None: not yet; True: RUNNING; False: it was cancelled (waiters told)
        self.withdrawn = False  # cancelled before it began: its runner was cancelled to take it back

    def begin(self) -> bool:
        """Make the future RUNNING, once (True); False if it was cancelled first (its waiters are told, once)."""
        if self.started is None:
            self.started = self.future.set_running_or_notify_cancel()
        return self.started

    def began(self) -> None:
        """Its worker said it began (`CallRecord.started`, on the loop). Cancelled first, it runs all the same (a
        withdrawal is on its way: its result is dropped)."""
        self.begin()


class Feed:
    """One executor's waiting line and the runners that hand it to a pool, a window at a time.

    Filled from any thread; attached to a pool on its loop (`attach`), where
    at most `IN_FLIGHT_PER_WORKER` x workers runners each take the next work
    item and await its call. Runners belong to the pool's `TaskOwner`: when
    the pool closes, work not yet handed over ends in `PoolClosed`.

    Args:
        direct: Hand every call to the pool at once (no window) and let the
            pool's admission refuse it: `AdmissionRejected`,
            `NoWorkersAvailable` and `CapacityTimeout` then end its future.
            Otherwise a call no worker took waits here for room.
    """

    def __init__(self, *, direct: bool = False) -> None:
        self._direct = direct
        self._pending: collections.deque[_Work] = collections.deque()
        self._lock = threading.Condition()
        self._unfinished = 0  # accepted and not done (pending, or handed to the pool), under _lock
        self._runners = 0  # on the loop's thread only
        self._waking = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0
        self._call: Callable[[CallRecord], Coroutine[Any, Any, tuple[bool, Any]]] | None = None
        self._spawn: Callable[..., Any] = lambda coro, name: None
        self._is_open: Callable[[], bool] = lambda: True
        self._workers: Callable[[], int] = lambda: 1
        self._per_worker = IN_FLIGHT_PER_WORKER
        self._room: asyncio.Event | None = None
        self._broken: BaseException | None = None
        self._on_idle: Callable[[], object] | None = None
        self._handed: dict[cf.Future[Any], _Work] = {}  # handed to the pool, not done (added, removed on the loop)
        self._cancel_all = False  # shutdown(cancel_futures=True): cancel what leaves the line from now on

    def attach(
        self,
        call: Callable[[CallRecord], Coroutine[Any, Any, tuple[bool, Any]]],
        spawn: Callable[..., Any],
        *,
        is_open: Callable[[], bool],
        workers: Callable[[], int],
        per_worker: int = IN_FLIGHT_PER_WORKER,
    ) -> None:
        """Start feeding a pool (on its loop): ``call`` runs a task (outcome as data), ``per_worker`` calls per worker."""
        self._call, self._spawn, self._is_open, self._workers = call, spawn, is_open, workers
        self._per_worker = max(2, per_worker)  # at least one running and one ready behind it
        self._room = asyncio.Event()
        self._thread = threading.get_ident()
        self._loop = asyncio.get_running_loop()
        self._wake()

    @property
    def attached(self) -> bool:
        """Whether a pool takes this line's work."""
        return self._loop is not None

    def on_loop(self) -> bool:
        """Whether the caller runs on the attached pool's loop (a wait there would block the pool)."""
        return self._thread == threading.get_ident()

    # -- any thread ------------------------------------------------------------------------------

    def put(self, future: cf.Future[Any], task: CallRecord) -> None:
        """Queue ``task`` for ``future`` (never blocks).

        Raises:
            PoolClosed: the pool this line feeds has closed.
        """
        if self._loop is not None and not self._is_open():
            raise PoolClosed("cannot schedule new futures: the pool is closed")
        with self._lock:
            self._unfinished += 1
        self._pending.append(_Work(future, task))
        if self._broken is not None:
            self.fail(self._broken)
            return
        loop = self._loop
        if loop is None or self._waking or self._runners >= self._limit():
            return  # not started yet (attach wakes), a wake is on its way, or a runner will take it
        self._waking = True
        if self.on_loop():
            loop.call_soon(self._wake)
            return
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop closed under us
            self.fail(PoolClosed("cannot schedule new futures: the pool is closed"))

    def fail(self, error: BaseException, *, for_good: bool = False) -> None:
        """End every pending future with ``error``; with ``for_good``, every later one too (a pool that never started)."""
        if for_good:
            self._broken = error
        self._drain(functools.partial(_fail, error=error))

    def cancel_pending(self) -> None:
        """Cancel every future whose call has not begun on a worker (``shutdown(cancel_futures=True)``): those
        waiting here, and those handed to the pool that wait in its line or in a worker's."""
        self._cancel_all = True  # (first: a work leaving the line now sees it, or is in _handed below)
        self._drain(cf.Future.cancel)
        for future in list(self._handed):  # (a copy made in C: safe beside the loop's thread)
            future.cancel()  # False for one that began: it runs to its end

    def wait_idle(self) -> None:
        """Block until every accepted future is done."""
        with self._lock:
            self._lock.wait_for(lambda: self._unfinished == 0)

    async def drained(self) -> None:
        """On the loop: wait until every accepted future is done (after ``shutdown``, nothing more comes)."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        self._on_idle = lambda: loop.call_soon_threadsafe(event.set)
        while True:
            with self._lock:
                if self._unfinished == 0:
                    return
            await event.wait()
            event.clear()

    def counts(self) -> tuple[int, int]:
        """``(pending, handed to the pool)`` now, for ``repr``."""
        pending = len(self._pending)
        return pending, max(0, self._unfinished - pending)

    def _drain(self, end: Callable[[cf.Future[Any]], object]) -> None:
        while True:
            try:
                work = self._pending.popleft()
            except IndexError:
                return
            end(work.future)
            self._done()

    def _done(self) -> None:
        with self._lock:
            self._unfinished -= 1
            if self._unfinished:
                return
            self._lock.notify_all()
        if self._on_idle is not None:
            self._on_idle()

    def _limit(self) -> int:
        if self._direct:
            return sys.maxsize
        return self._per_worker * max(1, self._workers())

    # -- the loop's thread -------------------------------------------------------------------------

    def _wake(self) -> None:
        self._waking = False
        if not self._is_open():
            self.fail(PoolClosed("the pool closed before the call was handed to it"))
            return
        for _ in range(min(self._limit() - self._runners, len(self._pending))):  # runners not started yet count too
            self._runners += 1
            try:
                self._spawn(self._run(), name="executor feed")
            except RuntimeError:  # the pool's tasks are closing
                self._runners -= 1
                self.fail(PoolClosed("the pool closed before the call was handed to it"))
                return

    async def _run(self) -> None:
        pending = self._pending
        try:
            while True:
                while pending:
                    try:
                        work = pending.popleft()
                    except IndexError:
                        break
                    try:
                        if not work.future.cancelled():
                            await self._settle(work)
                    finally:
                        if work.future.cancelled():
                            work.begin()  # (its waiters are told now, however the runner left)
                        work = None  # type: ignore[assignment]  # hold nothing of a finished call
                        self._done()
                self._runners -= 1
                if not pending or self._runners >= self._limit():
                    return
                self._runners += 1  # work came in while this runner was leaving
        except BaseException:
            self._runners -= 1
            raise

    async def _settle(self, work: _Work) -> None:
        """Run ``work``'s call and end its future (or, cancelled before its call began, take the call back)."""
        runner = work.runner = asyncio.current_task()
        work.task.started = work.began
        future = work.future
        self._handed[future] = work  # (before the flag is read: `cancel_pending` sets it, then looks here)
        try:
            if self._cancel_all:
                future.cancel()  # shutdown(cancel_futures=True) came as this work left the line
            if future.cancelled():
                return
            future.add_done_callback(self._cancelled)
            await self._outcome(work)
        except asyncio.CancelledError:
            if work.withdrawn and self._is_open() and runner is not None and not runner.uncancel():
                return  # taken back: the runner goes on to the next work
            # The pool is closing (a withdrawal may have crossed it): what it did not finish ends here.
            if work.begin():
                future.set_exception(PoolClosed("the pool closed before the call finished"))
            self.fail(PoolClosed("the pool closed before the call was handed to it"))
            raise
        finally:
            work.runner = work.task.started = None  # (no cycle task -> work -> task: freed as the call ends)
            del self._handed[future]

    def _cancelled(self, future: cf.Future[Any]) -> None:
        """A handed call's future is done (any thread): if it was cancelled, take its call back from the pool."""
        if not future.cancelled() or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._withdraw, future)
        except RuntimeError:  # the loop closed: nothing left to take back
            pass

    def _withdraw(self, future: cf.Future[Any]) -> None:
        work = self._handed.get(future)
        if work is not None and work.runner is not None and not work.withdrawn:
            work.withdrawn = True  # in the pool's line, or a worker's: its call is cancelled there
            work.runner.cancel()

    async def _outcome(self, work: _Work) -> None:
        assert self._call is not None and self._room is not None  # noqa: S101 - an invariant, stated for the type checker
        future, task = work.future, work.task
        while True:
            try:
                ok, value = await self._call(task)  # the function's own outcome, whatever it raised, is data
            except NoWorkersAvailable as exc:  # a view over a pool with no queue: wait for room, never refuse
                if self._direct:
                    if work.begin():
                        future.set_exception(exc)
                    return
                self._room.clear()
                try:
                    async with asyncio.timeout(BUSY_RETRY_S):
                        await self._room.wait()
                except TimeoutError:
                    pass
                continue
            except asyncio.CancelledError:
                raise  # withdrawn, or the pool is closing: `_settle` tells which
            except Exception as exc:  # noqa: BLE001  # a lost worker, a refused call: that future's outcome
                if work.begin():
                    future.set_exception(exc)
            except BaseException as exc:  # noqa: BLE001  # (SystemExit, KeyboardInterrupt from user data): the future's, not the feed's end
                broken = WorkerBroken(f"{task.name}() ended in {type(exc).__name__} on its way back: {exc!r}")
                broken.__cause__ = exc
                if work.begin():
                    future.set_exception(broken)
            else:
                if work.begin():
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(value)  # SystemExit, CancelledError ... as the standard library does
            self._room.set()
            return


_exiting = False
"""Whether the interpreter is exiting (`interpreter_exiting`): then no executor takes new work."""


def interpreter_exiting() -> None:
    """The interpreter is exiting (the main thread ended): ``submit`` from now on raises, as the standard
    library's executors do, ``RuntimeError('cannot schedule new futures after interpreter shutdown')``."""
    global _exiting
    _exiting = True


class FeedExecutor(cf.Executor):
    """``submit``, ``map`` and ``shutdown`` over a `Feed`; subclasses say how the feed starts and stops."""

    def __init__(self, feed: Feed) -> None:
        self._feed = feed
        self._shutdown_lock = threading.Lock()
        self._shut = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future[Any]:
        """Run ``fn(*args, **kwargs)`` on a worker; returns its `concurrent.futures.Future` at once.

        ``fn`` and the arguments are pickled here (cloudpickle): one that
        cannot be fails its future with `pool.SerializationError`.

        Raises:
            RuntimeError: after `shutdown` ('cannot schedule new futures after shutdown').
            PoolClosed: the pool under this executor has closed (a RuntimeError too).
        """
        return self._put(runner_for(_apply, fn), lambda: (Shipped(fn), args, kwargs))

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
        buffersize: int | None = None,
    ) -> Iterator[Any]:
        """``fn`` over the items of ``iterables`` on the workers, results in order; one call per ``chunksize`` items.

        As ``concurrent.futures.Executor.map`` (3.14), on every Python: work is
        submitted now (or ``buffersize`` chunks ahead of the reader), ``timeout``
        counts from this call, an item's exception is raised at that item, and
        closing the iterator cancels the chunks not yet handed to the pool.

        Raises:
            TypeError, ValueError: a bad ``chunksize`` or ``buffersize``.
            RuntimeError: after `shutdown`.
        """
        check_map_arguments(chunksize, buffersize)
        shipped = Shipped(fn)  # once for every chunk (a SerializationError here, as for an argument)
        chunks = batched(zip(*iterables, strict=False), chunksize)
        if chunksize == 1:
            return ordered_results(
                functools.partial(self._put_one, runner_for(_apply, fn), shipped),
                chunks,
                single,
                timeout=timeout,
                buffersize=buffersize,
            )
        name = name_of(fn)

        def split(result: tuple[list[Any], tuple[bytes, str] | None]) -> tuple[list[Any], BaseException | None]:
            values, failure = result
            return values, None if failure is None else wire.unpack_exception(*failure, name)

        return ordered_results(
            functools.partial(self._put_chunk, runner_for(_apply_chunk, fn), shipped),
            chunks,
            split,
            timeout=timeout,
            buffersize=buffersize,
        )

    def _put_one(self, runner: Routine[..., Any], fn: Shipped, chunk: Chunk) -> cf.Future[Any]:
        return self._put(runner, lambda: (fn, chunk[0], {}))

    def _put_chunk(self, runner: Routine[..., Any], fn: Shipped, chunk: Chunk) -> cf.Future[Any]:
        return self._put(runner, lambda: (fn, chunk))

    def _put(self, runner: Routine[..., Any], args: Callable[[], tuple[Any, ...]]) -> cf.Future[Any]:
        future: cf.Future[Any] = cf.Future()
        try:
            task = task_for(runner, args())
        except SerializationError as exc:
            future.set_exception(exc)
            return future
        with self._shutdown_lock:
            if _exiting:
                self._shut = True  # as the standard library: an executor at interpreter exit is shut down
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._start()
            self._feed.put(future, task)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more work; finish what was accepted (or cancel what has not started); safe to call twice.

        Args:
            wait: Return once every accepted future is done (and, for
                `pool.Executor`, its pool closed).
            cancel_futures: First cancel every future not yet handed to the pool.
        """
        with self._shutdown_lock:
            self._shut = True
        if cancel_futures:
            self._feed.cancel_pending()
        self._stop(wait)

    def _start(self) -> None:
        """Under the shutdown lock, before the first work item: start what runs the feed."""

    def _stop(self, wait: bool) -> None:
        """After ``shutdown``: let the feed finish, waiting for it when ``wait``."""
        if wait:
            self._feed.wait_idle()

    def __repr__(self) -> str:
        pending, running = self._feed.counts()
        state = "shut down" if self._shut else "open"
        return f"<{type(self).__qualname__} {state} [{pending} pending, {running} handed to the pool]>"


class PoolExecutor(FeedExecutor):
    """``WorkerPool.executor()``: a ``concurrent.futures.Executor`` over a pool that is open.

    Work queues here without limit whatever the pool's ``queue_depth``
    (a call no worker takes waits for room), so ``submit`` never blocks and
    never refuses, also when called on the pool's own loop (as
    ``loop.run_in_executor`` does). ``shutdown`` leaves the pool open; called
    on the pool's loop, ``shutdown(wait=True)`` does not wait (waiting there
    would stop the loop the work needs): it returns at once and the work
    accepted still finishes. When the pool closes, work not yet handed to it
    ends in `pool.PoolClosed`; calls already running get the pool's
    ``shutdown_grace``.
    """

    def _stop(self, wait: bool) -> None:
        if wait and not self._feed.on_loop():
            self._feed.wait_idle()


def submit_once(executor: cf.Executor, fn: Callable[[], Any]) -> cf.Future[Any]:
    """``executor.submit(fn)`` for a callable made for this one call that carries its data (a joblib batch).

    On a leakypool executor the worker loads ``fn`` for its call and keeps
    nothing of it (``submit`` keeps a small callable loaded for the next call
    that sends it; the executor's ``submit`` is not called). Any other
    executor just gets ``submit(fn)``.
    """
    if isinstance(executor, FeedExecutor):
        return executor._put(runner_for(_apply, fn), lambda: (Shipped(fn, keep=False), (), {}))
    return executor.submit(fn)
