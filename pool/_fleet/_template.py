"""The pool's side of the worker template: start it once, ask it to fork workers, hear when they exit.

See ``pool/_worker/_template.py`` for the template itself. It starts in one
of two ways. If this process runs no other thread, the template is a
``fork()`` of it: nothing to import again, so a pool's first workers are
up in tens of milliseconds. Otherwise (forking a threaded process can
leave a lock held forever in the child) it is a fresh interpreter that
imports the worker side. Either way it enters the worker side by name,
``pool._worker._template``, never by an import of this module. The pool talks
to it over a SOCK_SEQPACKET socketpair (one message per request or notice)
read on the pool's event loop. A forked worker is not the pool's child, so
its exit is watched through a pidfd (readable when it exits, child or not)
and its status comes from the template, which reaps it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final

from .._base import ForkedChild, TaskOwner, descriptors, native_threads, resident_bytes, watch_exit
from .._errors import WorkerStartError

_log = logging.getLogger("leakypool.pool")

FORK_MAX_RSS_BYTES: Final[int] = 256 << 20
"""Fork the template from this process only while it is this small: the template keeps the pages
as they were at the fork, so a large process that then changes its heap would pay for it twice."""

STATUS_WAIT_S: Final[float] = 5.0
"""After a worker's pidfd says it exited, how long to wait for the template to report its status."""


class WorkerTemplate:
    """A running template process of this pool.

    Args:
        env: The environment a fresh-interpreter template starts with (each worker gets its own).
        preload: Modules it imports besides the worker's own (e.g. the gRPC server, for workers over TCP).
        fork: Fork it from this process when that is safe (no other thread);
            else, or when False, it is a fresh interpreter.
    """

    def __init__(self, env: Mapping[str, str], preload: Sequence[str] = (), *, fork: bool = True) -> None:
        self._env = dict(env)
        self._preload = tuple(preload)
        self._fork = fork
        self.forked: bool = False  # whether it is a fork of this process (else a fresh interpreter)
        self._process: subprocess.Popen[bytes] | ForkedChild | None = None
        self._channel: socket.socket | None = None
        self._tasks = TaskOwner("worker template", _log)
        self._replies: collections.deque[asyncio.Future[int]] = collections.deque()
        self._statuses: dict[int, asyncio.Future[int]] = {}
        self._lock = asyncio.Lock()
        self.alive: bool = False
        self._closing = False
        self.exit_status: int | None = None  # once closed: 0 if it exited when told, -9 if it had to be killed

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def start(self, timeout: float) -> None:
        """Start the template and wait until it has imported everything.

        Raises:
            WorkerStartError: it did not say READY in time (it is killed and reaped).
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if self._fork and native_threads() == 1 and resident_bytes() <= FORK_MAX_RSS_BYTES:
                self._process = _fork(ours, theirs, self._preload)
                self.forked = True
            else:
                self._process = subprocess.Popen(  # noqa: ASYNC220 - returns once forked; the pool then awaits its socket without blocking
                    [sys.executable, "-m", "pool._worker._template", str(theirs.fileno()), *self._preload],
                    env=self._env,
                    stdin=subprocess.DEVNULL,
                    pass_fds=(theirs.fileno(),),
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        self._channel = ours
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                hello = await loop.sock_recv(ours, 4096)
            if not hello:
                code = await watch_exit(self._process)
                raise WorkerStartError(f"the worker template exited with status {code} before it was ready")
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, TimeoutError):
                raise WorkerStartError(f"the worker template did not start within {timeout:g}s") from None
            raise
        self.alive = True
        self._tasks.spawn(self._read(), name="worker template replies")

    async def fork(self, env: Mapping[str, str], fds: tuple[int, int]) -> int:
        """A new worker with ``env`` (its whole environment) and ``fds`` (READY pipe, lifeline); its pid.

        Raises:
            WorkerStartError: the template is gone.
        """
        if not self.alive or self._channel is None:
            raise WorkerStartError("the worker template is not running")
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[int] = loop.create_future()
        async with self._lock:  # requests and their replies stay in order
            self._replies.append(reply)
            try:
                await _send_fds(self._channel, json.dumps(dict(env)).encode(), fds)
            except OSError as exc:
                self._replies.remove(reply)
                raise WorkerStartError(f"the worker template is gone: {exc}") from None
        return await reply

    def status(self, pid: int) -> asyncio.Future[int]:
        """A future for worker ``pid``'s exit status, as the template reports it."""
        future = self._statuses.get(pid)
        if future is None:
            future = self._statuses[pid] = asyncio.get_running_loop().create_future()
        return future

    def forget(self, pid: int) -> None:
        """Worker ``pid``'s status has been read: drop it (pids are recycled)."""
        self._statuses.pop(pid, None)

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._channel is not None  # noqa: S101 - an invariant, stated for the type checker
        try:
            while True:
                try:
                    data = await loop.sock_recv(self._channel, 4096)
                except OSError:
                    data = b""
                if not data:
                    break
                message: dict[str, Any] = json.loads(data)
                if "pid" in message:
                    reply = self._replies.popleft()
                    if not reply.done():
                        reply.set_result(message["pid"])
                elif "exited" in message:
                    future = self.status(message["exited"])
                    if not future.done():
                        future.set_result(message["code"])
        finally:
            self.alive = False
            gone = WorkerStartError("the worker template exited")
            while self._replies:
                reply = self._replies.popleft()
                if not reply.done():
                    reply.set_exception(gone)
            if not self._closing:
                _log.warning("the worker template exited; workers start from a fresh interpreter from now on")

    def __repr__(self) -> str:
        how = "forked" if self.forked else "interpreter"
        return f"<WorkerTemplate pid={self.pid} {how} alive={self.alive}>"

    async def aclose(self) -> None:
        """Tell the template to exit (its workers keep their own lifelines), close the socket, and reap it."""
        self.alive = False
        self._closing = True
        if self._channel is not None:
            with contextlib.suppress(OSError):
                # An empty message, not only the socket's end: a template forked
                # later by another pool of this process holds a copy of our end.
                self._channel.send(b"")
            self._channel.close()
            self._channel = None
        await self._tasks.aclose()
        process, self._process = self._process, None
        if process is not None:
            exited = watch_exit(process)
            try:
                self.exit_status = await asyncio.wait_for(asyncio.shield(exited), 10)
            except TimeoutError:
                process.kill()
                self.exit_status = await exited
        for future in self._statuses.values():
            if not future.done():
                future.set_result(-1)  # nobody will report it now


async def _send_fds(channel: socket.socket, data: bytes, fds: tuple[int, int]) -> None:
    """Send one request with its descriptors, waiting while the socket's buffer is full.

    A pool that starts many workers at once (say 128) queues requests faster
    than the template forks; a full buffer means "later", not "gone".
    """
    loop = asyncio.get_running_loop()
    while True:
        try:
            socket.send_fds(channel, [data], list(fds))
            return
        except BlockingIOError:
            writable = loop.create_future()
            loop.add_writer(channel, _settle_once, writable)
            try:
                await writable
            finally:
                loop.remove_writer(channel)


def _fork(ours: socket.socket, theirs: socket.socket, preload: Sequence[str]) -> ForkedChild:
    """Fork the template from this (single-threaded) process; in the child, never returns.

    Signals stay blocked across the fork, so none reaches the child before it
    has dropped this process's handlers. The child closes every descriptor
    it inherited (listed here, by identity, just before the fork), keeping
    those that at-fork handlers made anew, such as libuv's signal pipe.
    """
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()  # or what is buffered would be written twice
    inherited = descriptors()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        raise
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return ForkedChild(pid)
    try:
        template = importlib.import_module("pool._worker._template")  # by name: see the module docstring
        template.main_forked(theirs.fileno(), list(preload), inherited, mask)
    finally:
        os._exit(1)


class ForkedWorker:
    """A worker the template forked, with the part of `subprocess.Popen` a `LocalWorker` uses.

    Signals go through a pidfd opened at once, so a recycled pid is never
    signalled; ``exited`` resolves when the pidfd says the process ended,
    with the status the template reports (-1 if it cannot).
    """

    def __init__(self, pid: int, template: WorkerTemplate) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._template = template
        self._gone = False
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[int] = loop.create_future()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:
            self._pidfd = None
            self._ended()
            return
        loop.add_reader(self._pidfd, self._ended)

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self._gone or self._pidfd is None:
            return
        signal.pidfd_send_signal(self._pidfd, sig)

    def _ended(self) -> None:
        if self._gone:
            return
        self._gone = True
        loop = asyncio.get_running_loop()
        if self._pidfd is not None:
            loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        status = self._template.status(self.pid)
        if not self._template.alive and not status.done():
            self._settle(-1)  # the template is gone: nobody reaps it for us, nobody reports its status
            return
        timer = loop.call_later(STATUS_WAIT_S, self._settle, -1)

        def settle(answer: asyncio.Future[int]) -> None:
            timer.cancel()
            self._settle(answer.result())

        status.add_done_callback(settle)

    def _settle(self, code: int) -> None:
        if not self.exited.done():
            self._template.forget(self.pid)
            self.returncode = code
            self.exited.set_result(code)


def _settle_once(waiter: asyncio.Future[None]) -> None:
    """Resolve ``waiter`` unless it already is (a writer callback may run again before it is removed)."""
    if not waiter.done():
        waiter.set_result(None)
