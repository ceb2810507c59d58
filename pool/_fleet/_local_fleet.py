"""The worker processes a pool starts itself: spawn, watch, replace, grow, stop.

A fleet keeps at least ``minimum`` workers: one that dies is replaced
(with growing back-off if they keep dying young), and a replacement that
fails to start is retried, with the same back-off, until the fleet is back
at ``minimum``. A replacement still owed counts as a worker, so growth
under load never takes the fleet past ``maximum``. Under load the pool asks
it to `grow`, one worker at a time, up to ``maximum``; those extra workers
run with an idle timeout and exit by themselves once the load is gone,
back down to ``minimum``. They are never replaced: load brings them back.

A worker that exits on purpose (`EXIT_RETIRED`: recycled after its task or
memory limit, or killed by `retire` for a hard timeout) is not a crash: it
is replaced at once, grown or not, with no back-off and no crash log, and
while its replacement starts it counts in `arriving`, so calls wait for it
rather than finding the pool empty. A worker whose initializer raises
(`WorkerInitError`) fails `start`; a replacement's is logged with its
traceback and retried after the crash back-off, and while no worker is left
`init_error` says why calls cannot run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Final

from .._base import EXIT_RETIRED, TaskOwner, check_private, new_uid
from .._errors import WorkerInitError, WorkerStartError
from .._transport import WorkerMetadata
from ._local_worker import LocalWorker, child_env
from ._template import WorkerTemplate

_log = logging.getLogger("leakypool.pool")

RESPAWN_BACKOFF_S: Final[tuple[float, ...]] = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Delay before replacing a crashed worker, by how many crashed young in a row."""

CRASH_WINDOW_S: Final[float] = 10.0
"""A worker that exits sooner than this after starting counts towards a crash loop."""

HURRIED_RETRY_S: Final[float] = 0.5
"""After `hurry`, a replacement that failed to start is tried again this soon (not at once: no spawn storm)."""

GROW_BACKOFF_S: Final[float] = 5.0
"""After a failed attempt to grow, wait this long before trying again."""


class LocalFleet:
    """Spawned workers of one pool.

    Args:
        env: ``LEAKYPOOL_*`` settings for every worker.
        minimum: Workers kept (replaced when they die).
        maximum: Workers at most, counting those grown under load.
        idle_timeout: Seconds a grown worker may idle before it exits.
        startup_timeout: Seconds a worker gets to report READY.
        shutdown_grace: Seconds in-flight calls get when the fleet stops.
        on_ready: Called with each worker's metadata once it serves.
        on_exit: Called with a worker's uid and why, once it exited.
        transport: ``"unix"``: each worker serves a unix socket in a
            directory only this user can enter (mode 0700), removed on
            `stop`; no port another local user could reach (a worker's
            port runs code). ``"tcp"``: 127.0.0.1 and a free port.
        template: Fork workers from a preloaded template process (one
            interpreter start and one round of imports for all of them);
            without it, or if it fails, each worker is a fresh interpreter.
        template_fork: Fork the template itself from this process when it
            runs no other thread (see `WorkerTemplate`).
        initializer: ``(initializer, initargs)`` pickled (`_wire.dumps`): written to
            a file in the fleet's private directory, which each worker loads
            and calls before it reports READY (by value where it must be).
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str],
        minimum: int,
        maximum: int,
        idle_timeout: float,
        startup_timeout: float,
        shutdown_grace: float,
        on_ready: Callable[[WorkerMetadata], None],
        on_exit: Callable[[uuid.UUID, str], None],
        transport: str = "unix",
        template: bool = True,
        template_fork: bool = True,
        initializer: bytes = b"",
    ) -> None:
        self._env = dict(env)
        self._initializer = initializer
        self._transport = transport
        self._socket_dir: str | None = None
        self._use_template = template
        self._template_fork = template_fork
        self._template: WorkerTemplate | None = None
        self.minimum = minimum
        self.maximum = maximum
        self._idle_timeout = idle_timeout
        self._startup_timeout = startup_timeout
        self._shutdown_grace = shutdown_grace
        self._on_ready = on_ready
        self._on_exit = on_exit
        self._workers: dict[uuid.UUID, LocalWorker] = {}
        self._tasks = TaskOwner("fleet", _log)
        self._owed = 0  # replacements of dead workers not started yet
        self._crashes = 0
        self._hurried = asyncio.Event()  # set: replacements skip the crash back-off (`hurry`)
        self._growing = False
        self._grow_after = 0.0
        self._open = False
        self._prepared = False
        self.grown: int = 0
        self.shrunk: int = 0  # grown workers that left after idling
        self.recycled: dict[str, int] = {}  # workers that exited on purpose, by reason (tasks, memory, timeout)
        self.crashes: int = 0  # workers that died unasked (replaced after the crash back-off)
        self.init_error: WorkerInitError | None = None  # the last start failed in its initializer
        self.template_exit_status: int | None = None  # once stopped: 0 if the template left when told, -9 if killed
        self.changed: Callable[[], None] = lambda: None  # set by the pool: what it waits for may have changed
        self._arriving = 0  # replacements of workers that exited on purpose, starting now

    @property
    def pids(self) -> list[int]:
        """Pids of the worker processes running now."""
        return [w.pid for w in self._workers.values() if w.pid is not None and w.returncode is None]

    def __len__(self) -> int:
        return len(self._workers)

    @property
    def owed(self) -> int:
        """Replacements of dead workers not started yet (waiting out a back-off)."""
        return self._owed

    @property
    def crash_streak(self) -> int:
        """Deaths in a row the crash back-off counts now (0 once a replacement lived `CRASH_WINDOW_S`)."""
        return self._crashes

    @property
    def growing(self) -> bool:
        """A worker is being started under load now."""
        return self._growing

    @property
    def template(self) -> WorkerTemplate | None:
        """The template spawned workers are forked from, if one was started."""
        return self._template

    @property
    def arriving(self) -> int:
        """Replacements of workers that exited on purpose, starting now: calls should wait for them."""
        return 0 if self.init_error is not None else self._arriving

    def coming(self, draining: set[uuid.UUID]) -> bool:
        """Whether a worker is on its way: a replacement starting, or one of ``draining`` is ours (it is replaced).

        ``draining`` (workers that turned calls away as draining) loses those no longer here.
        """
        draining.intersection_update(self._workers)
        return self.arriving > 0 or (bool(draining) and self._open and self.init_error is None)

    def stranded(self) -> WorkerInitError | None:
        """Why no worker can come now: the last start's `WorkerInitError` (a fresh copy), if no worker is left."""
        error = self.init_error
        if error is None or self._workers:
            return None
        copy = WorkerInitError(error.args[0], error.traceback)
        copy.__cause__ = error.__cause__
        return copy

    def retire(self, uid: uuid.UUID, reason: str = "timeout") -> bool:
        """Kill worker ``uid`` on purpose (SIGKILL) and replace it at once, with no crash back-off.

        For a worker that cannot stop by itself in time, such as one whose
        plain call passed its hard timeout: it leaves the pool at once (no
        call is sent to it any more), its calls in flight end as for any
        lost worker (`WorkerBroken`), its replacement starts now, and calls
        that find no worker meanwhile wait for it. Counted under ``reason``
        in ``leakypool_worker_recycled_total``. Returns False if ``uid`` is
        not one of this fleet's workers (or it was already replaced).
        """
        worker = self._workers.get(uid)
        if worker is None or worker.replaced:
            return False
        _log.info("retiring worker %s (pid %s): %s", uid, worker.pid, reason)
        worker.retire(reason)
        worker.retired = worker.retired or reason
        self._retiring(worker)  # out of the pool now (no call is sent to it), its replacement starting
        return True

    def __contains__(self, uid: object) -> bool:
        return uid in self._workers

    async def prepare(self) -> None:
        """Make the socket directory and start the template, before anything else starts a thread.

        The template can be a fork of this process only while it has no
        other thread: a pool with a store calls this before opening it.
        """
        if self._prepared:
            return
        self._prepared = True
        if (self._transport == "unix" or self._initializer) and self.maximum > 0:
            self._socket_dir = socket_directory()
        if self._initializer and self._socket_dir is not None:
            path = os.path.join(self._socket_dir, "initializer.pickle")
            with open(path, "wb") as f:  # noqa: ASYNC230 - once at start, the pickled initializer into this user's own 0700 directory
                f.write(self._initializer)
            self._env["LEAKYPOOL_INITIALIZER_FILE"] = path
        if self._use_template and self.maximum > 0 and template_supported():
            preload = () if self._transport == "unix" else ("pool._worker._grpc_server",)
            template = WorkerTemplate(child_env(), preload, fork=self._template_fork)
            try:
                await template.start(self._startup_timeout)
            except (WorkerStartError, OSError) as exc:
                _log.warning("no worker template (%s); each worker starts a fresh interpreter", exc)
            else:
                self._template = template

    async def start(self) -> None:
        """Start ``minimum`` workers concurrently; all must come up.

        Raises:
            WorkerStartError: one did not (the others are stopped again by `stop`).
        """
        await self.prepare()
        self._open = True
        results = await asyncio.gather(
            *(self._spawn(elastic=False) for _ in range(self.minimum)), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]

    def hurry(self) -> None:
        """From now on replace a dead worker at once, without the crash back-off, and end the back-offs running.

        For a pool whose owner is shutting it down with calls still to run
        (``Executor.shutdown(wait=True)``): they must not wait out back-offs
        that grow to 30 s while each of them crashes its worker. The fleet
        closes once they are done, so a crash loop cannot last.
        """
        self._hurried.set()

    def replace(self, uid: uuid.UUID) -> None:
        """Kill worker ``uid`` (it is broken); the watcher starts a replacement, as for a crash."""
        worker = self._workers.get(uid)
        if worker is not None:
            _log.warning("worker %s (pid %s) is broken; killing it to replace it", uid, worker.pid)
            worker.abandon()

    def grow(self) -> bool:
        """Start one more worker if below ``maximum`` and none is starting; True if it does."""
        if not self._open or self._growing or time.monotonic() < self._grow_after:
            return False
        if len(self._workers) + self._owed >= self.maximum:
            return False
        self._growing = True
        self._tasks.spawn(self._grow(), name="grow")
        return True

    async def _grow(self) -> None:
        try:
            await self._spawn(elastic=True)
            self.grown += 1
        except Exception:  # noqa: BLE001 - a failed spawn is logged and retried after a back-off
            _log.exception("could not grow the pool by one worker")
            self._grow_after = time.monotonic() + GROW_BACKOFF_S
        finally:
            self._growing = False

    async def stop(self) -> None:
        """Stop every worker (SIGTERM, grace, SIGKILL) and reap it, even if cancelled."""
        self._open = False
        await self._tasks.aclose()  # watchers, growth, replacements: no more starts
        workers = list(self._workers.values())
        work = asyncio.ensure_future(
            asyncio.gather(*(w.stop(self._shutdown_grace) for w in workers), return_exceptions=True)
        )
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            for worker in workers:
                await worker.kill()
            raise
        finally:
            self._workers.clear()
            template, self._template = self._template, None
            if template is not None:
                await template.aclose()
                self.template_exit_status = template.exit_status
            if self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
                self._socket_dir = None

    async def _spawn(self, *, elastic: bool) -> LocalWorker:
        uid = new_uid()
        env = self._env | {"LEAKYPOOL_UID": str(uid)}
        if elastic:
            env["LEAKYPOOL_IDLE_TIMEOUT"] = repr(self._idle_timeout)
        if self._socket_dir is not None and self._transport == "unix":
            check_private(self._socket_dir, what="the workers' socket directory")  # still ours, 0700 (issue 43)
            env["LEAKYPOOL_UNIX_SOCKET"] = os.path.join(self._socket_dir, f"{uid}.sock")
        worker = LocalWorker(uid, env, elastic=elastic, on_retiring=self._retiring)
        self._workers[uid] = worker
        try:
            metadata = await worker.start(self._startup_timeout, self._template)
        except BaseException as exc:
            self._workers.pop(uid, None)
            if isinstance(exc, WorkerInitError):
                self.init_error = exc
                self.changed()
            raise
        self.init_error = None
        self._tasks.spawn(self._watch(worker), name=f"watch {uid}")
        self._on_ready(metadata)
        return worker

    async def _watch(self, worker: LocalWorker) -> None:
        """Report a worker's exit; replace it if it was one of the minimum and died unasked."""
        started = time.monotonic()
        code = await worker.wait()
        self._workers.pop(worker.uid, None)
        if worker.elastic and code == 0:
            self.shrunk += 1
            self._on_exit(worker.uid, "left after idling (grown under load)")
            return
        if code == EXIT_RETIRED or worker.retired or worker.replaced:
            worker.retired = worker.retired or "unknown"
            self._retiring(worker)  # if it was not told already
            self._on_exit(worker.uid, f"exited on purpose ({worker.retired}, status {code})")
            return
        self._on_exit(worker.uid, f"exited with status {code}")
        if worker.stopping or not self._open or worker.elastic:
            return
        self.crashes += 1
        _log.warning("worker %s (pid %s) died with status %s; replacing it", worker.uid, worker.pid, code)
        self._crashes = self._crashes + 1 if time.monotonic() - started < CRASH_WINDOW_S else 0
        await self._replace(worker.uid)

    def _retiring(self, worker: LocalWorker) -> None:
        """``worker`` retires on purpose: count it, let the pool stop using it, start its replacement now (no back-off).

        Called when it says so (RETIRING: it still finishes its calls; the
        pool closes its stream once they ended, and then it exits) or when it
        exited with `EXIT_RETIRED` or was killed by `retire`.
        """
        if worker.replaced or worker.stopping or not self._open:
            return
        worker.replaced = True
        reason = worker.retired or "unknown"
        self.recycled[reason] = self.recycled.get(reason, 0) + 1
        self._arriving += 1  # before the eviction below wakes calls: they must see one coming
        self._on_exit(worker.uid, f"retiring on purpose ({reason})")  # graceful: its calls in flight finish
        _log.info("worker %s (pid %s) retires (%s); replacing it", worker.uid, worker.pid, reason)
        self._tasks.spawn(self._replace_retired(worker), name=f"replace retired {worker.uid}")

    async def _replace_retired(self, worker: LocalWorker) -> None:
        try:
            await self._spawn(elastic=worker.elastic)
        except Exception:  # noqa: BLE001 - a failed spawn is logged and retried after a back-off
            _log.exception("could not replace retired worker %s; retrying after a back-off", worker.uid)
            if not worker.elastic:
                self._crashes += 1
                self._tasks.spawn(self._replace(worker.uid), name=f"replace {worker.uid}")
        finally:
            self._arriving -= 1
            self.changed()

    async def _replace(self, dead: uuid.UUID) -> None:
        """Start a replacement, retrying with back-off until one comes up (or the fleet stops)."""
        self._owed += 1
        failed = False  # a try of this replacement failed to start
        try:
            while self._open:
                delay = RESPAWN_BACKOFF_S[min(self._crashes, len(RESPAWN_BACKOFF_S) - 1)]
                if self._hurried.is_set():
                    delay = min(delay, HURRIED_RETRY_S) if failed else 0.0  # (one that cannot start: no storm)
                    await asyncio.sleep(delay)
                elif delay:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(delay):
                            await self._hurried.wait()  # (`hurry` ends it)
                self._owed -= 1  # from here on the starting worker counts in _workers
                try:
                    await self._spawn(elastic=False)
                except WorkerInitError as exc:
                    self._owed += 1
                    self._crashes += 1
                    failed = True
                    _log.error(
                        "could not replace worker %s: its initializer raised; retrying after %gs\n%s",
                        dead,
                        RESPAWN_BACKOFF_S[min(self._crashes, len(RESPAWN_BACKOFF_S) - 1)],
                        exc.traceback,
                    )
                except Exception:  # noqa: BLE001 - a failed respawn is owed and retried after a back-off
                    self._owed += 1
                    self._crashes += 1
                    failed = True
                    _log.exception("could not replace worker %s; retrying", dead)
                else:
                    return
        finally:
            if not self._open:
                self._owed = 0


def template_supported() -> bool:
    """Whether this platform has what the template needs (Linux: pidfds, fd passing, fork)."""
    return hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds")


def socket_directory() -> str:
    """A new directory for workers' unix sockets, mode 0700 (``mkdtemp``), short enough for a socket path.

    A socket path may hold about 107 bytes; a long ``TMPDIR`` falls back to /tmp.
    """
    base = tempfile.gettempdir()
    if len(base) > 40:
        base = "/tmp"  # noqa: S108 - only the directory mkdtemp makes its private 0700 folder in
    return tempfile.mkdtemp(prefix="leakypool-", dir=base)
