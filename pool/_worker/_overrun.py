"""Routines on the main loop, and a watch thread that answers for it while a routine step overruns.

A worker whose only clients are its pool's own unix socket runs routines
on the same loop as its streams: no thread hop, no GIL hand-over, one
wake-up each way per call. What that would cost is DESIGN's promise that a
busy worker still says "no" in milliseconds, so:

    main thread: holds the `Guard` always, but while user code runs
                 (`unlocked`: each step of a routine, and of tasks routines start)
    watch thread: every `OVERRUN_S` while anything runs, looks at the guard:
                 user code running for longer? take the guard and `serve`:
                 read what waits on the Dispatch sockets, admit or reject
                 it, write the answers; routines it accepted start when the
                 main loop is back

The guard is what makes the watch's work safe: whoever holds it owns the
streams and the admission books, and the main thread never gives it up
inside the loop's own machinery (uvloop releases the GIL only around its
poll, which runs with the guard held), only inside user code. What the
watch schedules onto the loop (call_soon, timers, writes) and what user
code schedules meanwhile are serialised by the GIL: uvloop's calls do not
release it. A routine that blocks in C with the GIL released (a long NumPy
call) is answered for the same way; one that holds the GIL is answered at
Python's switch interval (5 ms), as with a second loop thread.

Not watched (the guard is held while they run): plain callbacks
(``loop.call_soon``), tasks not started from a routine (from another
thread, say), async generator finalizers, and a routine's ``finally``
blocks when its coroutine is closed rather than cancelled.

The watch runs with the main loop set as its running loop (a private
asyncio function), so `asyncio.get_running_loop` there is the main loop's,
and `asyncio.current_task` the routine it answers for.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any, Final

_log = logging.getLogger("leakypool.worker")

OVERRUN_S: Final[float] = 0.002
"""How long user code may hold the main loop before the watch answers the streams for it."""

PARK_AFTER_S: Final[float] = 1.0
"""The watch stops ticking after this long with no user code seen (an idle worker costs nothing)."""


class Guard:
    """Who may touch the worker's streams and books now: the main thread, or the watch while user code runs."""

    __slots__ = ("lock", "parked", "since", "wake", "watch")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()  # the main thread's, from the start
        self.since = 0.0  # when the user code running now started (monotonic); 0: none runs
        self.watch = 0  # the watch thread's ident (what runs there never counts as user code)
        self.parked = False  # the watch sleeps until woken
        self.wake = threading.Event()


@types.coroutine
def unlocked(guard: Guard, coro: Coroutine[Any, Any, Any]) -> Generator[Any, Any, Any]:
    """Await ``coro`` (user code) with the guard released while each of its steps runs.

    The delegation of ``await`` (PEP 380), with the release around every
    ``send`` and ``throw``; what the steps yield goes to the task untouched.
    """
    lock = guard.lock
    value: Any = None
    error: BaseException | None = None
    while True:
        guard.since = time.monotonic()
        if guard.parked:
            guard.wake.set()
        lock.release()
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        finally:
            lock.acquire()
            guard.since = 0.0
        value, error = None, None
        try:
            value = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - a cancellation, thrown in by the task: into the routine
            error = exc


def task_factory(guard: Guard) -> Callable[..., asyncio.Task[Any]]:
    """A loop task factory: a task that user code starts runs its steps `unlocked` too."""

    def factory(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any) -> asyncio.Task[Any]:
        if guard.since and threading.get_ident() != guard.watch:
            coro = _user_task(guard, coro)
            kwargs.pop("eager_start", None)  # an eager first step would run inside the caller's unlocked one
        return asyncio.Task(coro, loop=loop, **kwargs)

    return factory


async def _user_task(guard: Guard, coro: Coroutine[Any, Any, Any]) -> Any:
    return await unlocked(guard, coro)


class Here:
    """Runs callbacks on the main loop for code that also runs on the watch thread.

    On the main thread a callback runs at once (no hop, no wake-up); from
    the watch thread it waits for the main loop (the routine it starts, or
    cancels, runs there anyway).
    """

    __slots__ = ("_context", "_guard", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, guard: Guard) -> None:
        self._loop = loop
        self._guard = guard
        self._context = contextvars.copy_context()  # the main loop's, for what the watch queues

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the main loop: now, or once it is back from user code."""
        if threading.get_ident() == self._guard.watch:
            self._loop.call_soon_threadsafe(fn, *args, context=self._context)
        else:
            fn(*args)


class Watch:
    """The thread that answers the streams while user code overruns on the main loop.

    Args:
        guard: Shared with the main thread.
        loop: The main loop (what the served code sees as its running loop).
        serve: Reads and answers the streams (called holding the guard).
    """

    def __init__(self, guard: Guard, loop: asyncio.AbstractEventLoop, serve: Callable[[], None]) -> None:
        self._guard = guard
        self._loop = loop
        self._serve = serve
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="leakypool-watch", daemon=True)

    def start(self) -> None:
        """Start watching."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (at most ``timeout`` s)."""
        self._stopping = True
        self._guard.wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        guard = self._guard
        guard.watch = threading.get_ident()
        seen = time.monotonic()
        while not self._stopping:
            time.sleep(OVERRUN_S)
            since = guard.since
            now = time.monotonic()
            if since:
                seen = now
                if now - since >= OVERRUN_S and guard.lock.acquire(blocking=False):
                    self._rescue()
            elif now - seen > PARK_AFTER_S:
                self._park()
                seen = time.monotonic()

    def _park(self) -> None:
        guard = self._guard
        guard.parked = True  # set before looking again: user code starting now sees it and wakes us
        if not guard.since and not self._stopping:
            guard.wake.wait()
        guard.wake.clear()
        guard.parked = False

    def _rescue(self) -> None:
        asyncio.events._set_running_loop(self._loop)  # what it runs schedules onto the main loop
        try:
            self._serve()
        except Exception:  # noqa: BLE001 - logged; the overrun thread must hand the loop back in the finally
            _log.exception("answering the streams while a routine overran failed")
        finally:
            asyncio.events._set_running_loop(None)
            self._guard.lock.release()
