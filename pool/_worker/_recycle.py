"""A worker's set-up and recycling: the initializer, task and memory limits, retiring on purpose.

    start ──> server bound ──> initializer(*initargs) ── raised ──> INITFAIL line to the pool, exit EXIT_INIT_FAILED
                                    │ returned
                                    v
              READY (RSS noted) ──> serving: each accepted call counts; after each call, RSS is read
                                    │ count reached its limit | RSS - RSS at READY > --max-memory
                                    v
              retire: stop accepting, "RETIRING reason" to the pool, finish what runs,
                      wait for the pool to close its streams, exit EXIT_RETIRED

The status pipe is the READY pipe kept open: after ``READY {json}`` the
worker writes at most one more line, ``RETIRING <reason>``, as it starts to
retire. Its pool then starts the replacement at once, stops sending it
calls and closes its stream once its calls have ended; the worker exits
when that stream is closed (`HANDOFF_S` at most). So no call is ever sent
to a worker that is closing its end, and the pool never has a gap in
which it has one worker fewer and none on its way. The exit status
(`EXIT_RETIRED`) also says "not a crash" on its own (`retire_now`).

Memory is RSS (from /proc/self/statm, ~17 µs a read) minus RSS when the
worker became ready, so pages a forked worker shares with its template are
not charged to it. Its unique memory (USS, /proc/self/smaps_rollup) says
the same more exactly but costs ~260 µs a read (measured with numpy
loaded), more than a small call: too much to read after every call.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, Final, NoReturn, Protocol

from .._base import EXIT_RETIRED, RANDOM, resident_bytes
from .._config import WorkerConfig
from .._errors import ConfigError
from .._transport import buffers, wire

_log = logging.getLogger("leakypool.worker")

TASK_JITTER: Final[float] = 0.1
"""Each worker's task limit is drawn in [N, (1 + this) N], so workers started together do not all recycle at once."""

HANDOFF_S: Final[float] = 30.0
"""A retiring worker waits this long at most for its pool to close its streams (a wedged pool does not keep it)."""

_status_fd = -1  # the READY pipe, kept open for the RETIRING line (-1: no pool listens)


def draw_task_limit(limit: int) -> int:
    """This worker's task limit: uniform in ``[limit, floor(1.1 limit)]``; 0 stays 0.

    Drawn once per worker, as gunicorn's ``max_requests_jitter`` does.
    """
    if limit <= 0:
        return 0
    return RANDOM.randint(limit, int(limit * (1 + TASK_JITTER)))


class Recycler:
    """Decides when a worker has done enough: a task count and a memory growth limit.

    Args:
        max_tasks: Calls to accept before retiring (drawn with `draw_task_limit`); 0 = no limit.
        max_memory: Bytes of resident memory over the baseline (see `ready`) past which to retire; 0 = no limit.
        rss: Reads the memory the worker holds now (default: resident, less the reusable large-value regions).
    """

    def __init__(self, max_tasks: int, max_memory: int, rss: Callable[[], int] | None = None) -> None:
        self.task_limit = draw_task_limit(max_tasks)
        self.max_memory = max_memory
        self._rss = rss or _own_memory
        self.baseline = 0
        self.accepted = 0  # calls started (a plain call counts when it starts, not while it waits in line)
        self.reason = ""  # "tasks" or "memory" once it asked to retire
        self._lock = threading.Lock()  # the plain thread counts the calls it starts (`take`)

    def ready(self) -> None:
        """The worker is ready: its memory from here on is what calls added."""
        self.baseline = self._rss()

    def take(self) -> bool:
        """Count a call that starts now (from any thread); False if the task limit was reached: it must not start.

        So a worker runs exactly its limit: calls still waiting in its plain
        line when the limit is reached are handed back, never run here.
        """
        with self._lock:
            if self.task_limit and self.accepted >= self.task_limit:
                return False
            self.accepted += 1
            if self.task_limit and self.accepted >= self.task_limit and not self.reason:
                self.reason = "tasks"
            return True

    def due(self) -> str:
        """Why to retire for the task limit, once it is reached ("" before): the last call it takes started."""
        if self.reason != "tasks":
            return ""
        return f"recycled after {self.accepted} calls (--max-tasks, drawn {self.task_limit})"

    def on_end(self) -> str:
        """A call ended; a reason to retire ("" to go on): the worker grew past ``max_memory``."""
        if not self.max_memory or self.reason:
            return ""
        grown = self._rss() - self.baseline
        if grown > self.max_memory:
            self.reason = "memory"
            limit = self.max_memory / 2**20
            return f"recycled: {grown / 2**20:.1f} MiB above its memory when ready (--max-memory {limit:.1f} MiB)"
        return ""


# -- the initializer --------------------------------------------------------------------


def _own_memory() -> int:
    """Resident bytes, less the large-value regions kept for reuse (`_buffers`: not the worker's own growth)."""
    return resident_bytes() - buffers.idle_bytes()


class InitializerFailed(Exception):
    """The initializer raised; ``args[0]`` is its exception."""


def load_initializer(config: WorkerConfig) -> tuple[Callable[..., Any], tuple[Any, ...]] | None:
    """The initializer and its arguments: shipped by a pool (a pickle in a file), else ``--initializer``.

    Raises:
        ConfigError: it cannot be read, imported or is not callable.
    """
    fn: Any
    if config.initializer_file:
        try:
            with open(config.initializer_file, "rb") as f:
                fn, args = wire.loads(f.read(), what="the shipped initializer")
        except (OSError, ValueError, TypeError) as exc:
            raise ConfigError(f"LEAKYPOOL_INITIALIZER_FILE: {exc}") from None
        return fn, tuple(args)
    if not config.initializer:
        return None
    module, _, attribute = config.initializer.partition(":")
    try:
        fn = importlib.import_module(module)
        for part in attribute.split("."):
            fn = getattr(fn, part)
    except Exception as exc:  # noqa: BLE001 - an import error of any kind in user code: a bad flag, said in one line
        why = f"{type(exc).__name__}: {exc}"
        raise ConfigError(f"--initializer {config.initializer}: cannot import it: {why}") from None
    if not callable(fn):
        raise ConfigError(f"--initializer {config.initializer}: expected a callable, got {fn!r}")
    return fn, ()


async def run_initializer(setup: tuple[Callable[..., Any], tuple[Any, ...]], loop: asyncio.AbstractEventLoop) -> None:
    """Call the initializer once; an async one runs on ``loop`` (where the routines run).

    Raises:
        InitializerFailed: it raised (its exception is the argument).
    """
    fn, args = setup
    try:
        result = fn(*args)
        if asyncio.iscoroutine(result):
            if loop is asyncio.get_running_loop():
                await result
            else:
                await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(result, loop))
    except Exception as exc:
        raise InitializerFailed(exc) from exc


class Serving(Protocol):
    """What `set_up` needs of the `WorkerService` (a protocol: the service imports this module's users)."""

    lifecycle: Any  # a `_lifecycle.Lifecycle` (which imports this module)

    async def aclose(self) -> None: ...


def routine_loop(service: Serving) -> asyncio.AbstractEventLoop:
    """The loop ``service`` runs routines on: its routine thread's, else (inline) this one."""
    routines = getattr(service, "_routines", None)  # the service's own; read here to keep it small
    return asyncio.get_running_loop() if routines is None else routines.loop


async def streams_closed(service: Serving, timeout: float) -> None:
    """Wait (``timeout`` s at most) until every dispatcher has closed its stream to ``service``."""
    peers = getattr(service, "_peers", {})  # the service's own, by session; read here to keep it small
    if streams := [peer.stream for peer in peers.values() if peer.stream is not None]:
        await asyncio.wait(streams, timeout=timeout)


async def set_up(
    config: WorkerConfig,
    service: Serving,
    setup: tuple[Callable[..., Any], tuple[Any, ...]] | None,
) -> None:
    """Give ``service`` its `Recycler` and run the initializer (the server is bound, nothing published yet).

    Raises:
        InitializerFailed: it raised: reported to the pool (the caller stops the server and the service).
    """
    if config.max_tasks or config.max_memory:
        lifecycle = service.lifecycle
        lifecycle.recycler = Recycler(config.max_tasks, config.max_memory)

        def retiring() -> None:
            if lifecycle.recycled:  # a recycling drain (not a stop asked for): tell the pool why
                report_retiring(lifecycle.recycled)

        lifecycle.on_drain(retiring)
        if config.ready_fd >= 0:  # a pool listens: it closes our streams once it sent its last call
            lifecycle.handoff = lambda: streams_closed(service, HANDOFF_S)
    if setup is None:
        return
    try:
        await run_initializer(setup, routine_loop(service))
    except InitializerFailed as failed:
        report_init_failure(config.ready_fd, failed.args[0])
        raise


def report_init_failure(fd: int, exc: BaseException) -> None:
    """Log the initializer's traceback and send it, with the pickled exception, to the pool (``INITFAIL {json}``)."""
    tb = "".join(traceback.format_exception(exc))
    _log.error("the initializer raised; exiting:\n%s", tb.rstrip())
    if fd < 0:
        return
    blob, _ = wire.pack_exception(exc, "the initializer")
    line = "INITFAIL " + json.dumps({"error": base64.b64encode(blob).decode(), "traceback": tb}) + "\n"
    _write(fd, line)


# -- the status pipe, and retiring on purpose ------------------------------------------


def report_ready(fd: int, info: dict[str, Any], recycler: Recycler | None = None) -> None:
    """Note the baseline memory, write ``READY {json}`` to the pool and keep the pipe for the ``RETIRING`` line."""
    global _status_fd
    if recycler is not None:
        recycler.ready()
    if fd < 0:
        return
    if _write(fd, "READY " + json.dumps(info) + "\n"):
        _status_fd = fd
    else:
        # The pool timed out waiting (it says so itself), or is closing while a replacement started (a recycle
        # at the end of an Executor's work): nothing for the worker's log to warn about (issue 42, item 8).
        _log.info("the pool stopped waiting for this worker to start; it will be stopped")


def report_retiring(reason: str) -> None:
    """Tell the pool (if one listens) that this worker retires on purpose: ``tasks``, ``memory``, ``timeout``."""
    global _status_fd
    fd, _status_fd = _status_fd, -1
    if fd >= 0:
        _write(fd, f"RETIRING {reason}\n")
        os.close(fd)


def retire_now(reason: str = "timeout") -> NoReturn:
    """End this worker at once with `EXIT_RETIRED`: its pool replaces it with no crash back-off.

    For what cannot be stopped any other way, such as a plain call past its
    hard timeout (its thread cannot be interrupted). Safe from any thread:
    it tells the pool ``reason`` (counted as ``leakypool_worker_recycled_total{reason}``),
    flushes the log handlers and stdio, then ``os._exit``: nothing else
    runs, so outcomes not yet written are lost (their dispatchers see the
    stream end: ``WorkerBroken``). Flush what must leave before calling it.
    """
    try:
        _log.warning("retiring at once (%s)", reason)
        report_retiring(reason)
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(EXIT_RETIRED)


def _write(fd: int, line: str) -> bool:
    try:
        os.write(fd, line.encode())
    except OSError:  # the pool is gone, or stopped listening
        return False
    return True
