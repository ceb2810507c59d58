"""A worker subprocess this pool started: spawn, wait for READY, stop, reap.

The child is ``python -m worker_main`` with its settings in ``env`` and
two pipes besides stdio:

- *ready*: the child writes one ``READY {json}`` line (uid, port, pid) once
  it serves, and keeps it open: as it starts to retire on purpose (a
  recycle) it writes ``RETIRING <reason>``, read here at once (`retired`,
  then ``on_retiring``). A child that
  dies first closes it empty; one whose initializer raised writes
  ``INITFAIL {json}`` (the pickled exception and its traceback) instead.
- *lifeline*: the child watches the read end; the parent holds the write
  end and never writes. When the parent dies, however abruptly, the kernel
  closes it and the child exits: no orphan outlives its pool.

Stopping is SIGTERM (the worker drains within its grace), then SIGKILL
after the grace, then waiting for the exit status: the child is always
reaped.

The child is started with `subprocess.Popen` (vfork + exec in C) rather
than the event loop's subprocess support: a loop that forks (uvloop does)
runs Python's after-fork handlers in the child, which can hang forever in
a process with threads. Its exit is watched with a pidfd on the loop, so
no thread waits for it either.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .._base import watch_exit
from .._config import PREFIX
from .._errors import WorkerInitError, WorkerStartError
from .._transport import WorkerMetadata, wire
from ._template import ForkedWorker, WorkerTemplate

_log = logging.getLogger("leakypool.pool")


class LocalWorker:
    """One spawned worker process.

    Args:
        uid: The uid the worker will serve under.
        env: ``LEAKYPOOL_*`` settings for it (see ``WorkerConfig.to_env``).
        elastic: Started to absorb load (it idles out by itself).
    """

    def __init__(
        self,
        uid: uuid.UUID,
        env: Mapping[str, str],
        *,
        elastic: bool = False,
        on_retiring: Callable[[LocalWorker], None] | None = None,
    ) -> None:
        self.uid = uid
        self.elastic = elastic
        self._env = env
        self._process: subprocess.Popen[bytes] | ForkedWorker | None = None
        self._exited: asyncio.Future[int] | None = None
        self._lifeline: int | None = None
        self.metadata: WorkerMetadata | None = None
        self.stopping = False
        self.retiring = ""  # why the pool killed it on purpose (`retire`): not a crash
        self.retired = ""  # why it exits on purpose, as it said (RETIRING line) or as the pool decided
        self.replaced = False  # its replacement was started already
        self._on_retiring = on_retiring
        self._status: int | None = None  # the READY pipe's read end, kept for the RETIRING line
        self._status_data = bytearray()

    @property
    def pid(self) -> int | None:
        """The child's pid, once spawned."""
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit status, once reaped."""
        return None if self._process is None else self._process.returncode

    async def start(self, timeout: float, template: WorkerTemplate | None = None) -> WorkerMetadata:
        """Spawn the child (forked from ``template`` when it runs) and wait (at most ``timeout`` s) until it serves.

        Raises:
            WorkerStartError: it exited, or said nothing, in time (it is
                killed and reaped before this raises).
        """
        ready_r, ready_w = os.pipe()
        life_r, life_w = os.pipe()
        env = _child_env(self._env, ready_w, life_r)
        try:
            pid = None
            if template is not None and template.alive:
                try:
                    pid = await template.fork(env, (ready_w, life_r))
                except WorkerStartError as exc:
                    _log.warning("starting worker %s from a fresh interpreter: %s", self.uid, exc)
            if template is not None and pid is not None:
                self._process = ForkedWorker(pid, template)
                self._exited = self._process.exited
            else:
                self._process = subprocess.Popen(  # noqa: ASYNC220 - returns once forked; the pool then awaits the READY pipe without blocking
                    [sys.executable, "-m", "worker_main"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    pass_fds=(ready_w, life_r),
                )
                self._exited = watch_exit(self._process)
        except BaseException:
            for fd in (ready_r, ready_w, life_r, life_w):
                os.close(fd)
            raise
        finally:
            if self._process is not None:
                os.close(ready_w)
                os.close(life_r)
        self._lifeline = life_w
        try:
            async with asyncio.timeout(timeout):
                line, rest = await _read_line(ready_r)
        except BaseException as exc:
            os.close(ready_r)
            await self.kill()
            if isinstance(exc, TimeoutError):
                raise WorkerStartError(f"worker {self.uid} did not report READY within {timeout:g}s") from None
            raise
        if not line.startswith("READY "):
            os.close(ready_r)
            code = await self.kill()
            if line.startswith("INITFAIL "):
                raise init_error(self.uid, line[len("INITFAIL ") :])
            raise WorkerStartError(
                f"worker {self.uid} exited with status {code} before it was ready (its stderr is above)"
            )
        self._status = ready_r
        loop = asyncio.get_running_loop()
        loop.add_reader(ready_r, self._read_status)
        if rest:  # a status line that came in the same read as READY: heard once the caller has the worker
            self._status_data.extend(rest)
            loop.call_soon(self._status_seen)
        info: dict[str, Any] = json.loads(line[len("READY ") :])
        self.metadata = WorkerMetadata(
            uid=self.uid,
            address=f"unix:{info['unix_socket']}" if info.get("unix_socket") else f"127.0.0.1:{info['port']}",
            pid=info["pid"],
            version=info.get("version", ""),
            tags=frozenset(info.get("tags", ())),
            capacity=info.get("capacity", 0),
            tls=False,
            local=True,
            interpreter=info.get("interpreter", ""),
            build=info.get("build", ""),
        )
        return self.metadata

    async def wait(self) -> int:
        """Wait for the child to exit; its exit status (it is reaped)."""
        assert self._exited is not None  # noqa: S101 - an invariant, stated for the type checker
        code = await asyncio.shield(self._exited)
        self._close_lifeline()
        self._read_status()  # a line written just before the exit (`retire_now`)
        self._close_status()
        self.retired = self.retired or self.retiring
        return code

    def retire(self, reason: str) -> None:
        """Kill the child on purpose (SIGKILL): its exit is not a crash; it is replaced at once."""
        self.retiring = self.retiring or reason
        self._signal(signal.SIGKILL)

    def _read_status(self) -> None:
        """Read the status pipe: a ``RETIRING <reason>`` line is passed on at once; at its end, stop reading."""
        fd = self._status
        if fd is None:
            return
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        self._status_data.extend(chunk)
        if not chunk:
            self._close_status()
        self._status_seen()

    def _status_seen(self) -> None:
        if b"RETIRING " in self._status_data and not self.retired:
            line = bytes(self._status_data).split(b"RETIRING ", 1)[1].split(b"\n", 1)[0]
            self.retired = line.decode(errors="replace").strip() or "unknown"
            if self._on_retiring is not None:
                self._on_retiring(self)

    def _close_status(self) -> None:
        fd, self._status = self._status, None
        if fd is not None:
            asyncio.get_running_loop().remove_reader(fd)
            os.close(fd)

    def terminate(self) -> None:
        """Ask the child to drain and exit (SIGTERM)."""
        self.stopping = True
        self._signal(signal.SIGTERM)

    async def stop(self, grace: float) -> int:
        """SIGTERM, wait ``grace`` s (plus a margin), then SIGKILL; always reaps."""
        if self._process is None:
            return 0
        self.terminate()
        try:
            return await asyncio.wait_for(self.wait(), grace + 2.0)
        except TimeoutError:
            return await self.kill()

    def abandon(self) -> None:
        """SIGKILL the child without marking it as stopping: it counts as a crash (and is replaced)."""
        self._signal(signal.SIGKILL)

    async def kill(self) -> int:
        """SIGKILL the child and reap it."""
        if self._process is None:
            return 0
        self.stopping = True
        self._signal(signal.SIGKILL)
        return await self.wait()

    def _signal(self, sig: int) -> None:
        if self._process is not None and self._process.returncode is None:
            try:
                self._process.send_signal(sig)
            except ProcessLookupError:
                pass

    def _close_lifeline(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None

    def __repr__(self) -> str:
        return f"<LocalWorker {self.uid} pid={self.pid} returncode={self.returncode}>"


def init_error(uid: uuid.UUID, payload: str) -> WorkerInitError:
    """The `WorkerInitError` for an ``INITFAIL`` line: the initializer's exception (rebuilt here) as its cause."""
    try:
        report = json.loads(payload)
        tb = str(report.get("traceback", ""))
        cause: BaseException = wire.unpack_exception(base64.b64decode(report["error"]), "", "the initializer")
    except (ValueError, KeyError, TypeError) as exc:
        tb, cause = payload, exc  # a garbled report: keep what we have
    last = tb.strip().splitlines()[-1] if tb.strip() else type(cause).__name__
    error = WorkerInitError(f"worker {uid}: its initializer raised {last}", tb)
    error.__cause__ = cause
    return error


def child_env(settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """A worker process's environment: ours without LEAKYPOOL_*, plus ``settings`` and sys.path.

    Also the worker template's (it starts with no settings; each fork gets its own).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    env.update(settings or {})
    # What this process can import, the worker can import: routines pickled
    # by reference (tests.integration.routines.common.add) resolve there too.
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def _child_env(settings: Mapping[str, str], ready_fd: int, lifeline_fd: int) -> dict[str, str]:
    """`child_env` plus the READY pipe and the lifeline of one worker."""
    return child_env(settings) | {PREFIX + "READY_FD": str(ready_fd), PREFIX + "LIFELINE_FD": str(lifeline_fd)}


async def _read_line(fd: int) -> tuple[str, bytes]:
    """Read one line from pipe ``fd`` (the caller closes it; empty if the writer closed first), and what came after it."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    data = bytearray()
    complete: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return
        data.extend(chunk)
        if (not chunk or b"\n" in data) and not complete.done():
            complete.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await complete
    finally:
        loop.remove_reader(fd)
    line, _, rest = bytes(data).partition(b"\n")
    return line.decode(errors="replace").strip(), rest
