"""Provisioners: where a pool gets one more worker when work finds none with room.

A provisioner starts a worker *somewhere* and returns; the worker joins
the pool through discovery (`pool.StoreDiscovery`, usually), so the pool
never needs to know how or where it ran. Three shapes:

- `SubprocessProvisioner`: the default, today's local spawn-on-overflow
  (the pool's own fleet, joined over a private unix socket);
- `CommandProvisioner`: runs a command per requested worker (``docker run``,
  ``ssh``, ``kubectl run``, ``aws ecs run-task`` ...);
- anything else with ``async def provision(request)`` (a boto3 or
  Kubernetes API call; see docs/capacity.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from .._base import TaskOwner, public, redacted, watch_exit
from .._errors import ConfigError, ProvisionError
from ._local_worker import child_env

if TYPE_CHECKING:
    from ._local_fleet import LocalFleet

_log = logging.getLogger("leakypool.pool")

SETTLE_S: Final[float] = 5.0
"""A provisioning command that exits within this long is judged by its status; one still running is the worker."""

STDERR_TAIL_BYTES: Final[int] = 2000
"""How much of a provisioning command's stderr its failure message quotes."""

TAIL_WAIT_S: Final[float] = 1.0
"""After a command exits, how long its stderr may take to reach its end (a detached child can hold it open)."""

STOP_GRACE_S: Final[float] = 4.0
"""On close, a command still running (a foreground worker) gets this long after SIGTERM, then SIGKILL."""


@dataclasses.dataclass(frozen=True)
class WorkerRequest:
    """What a provisioned worker needs to join the pool that asked for it.

    Attributes:
        uid: The uid the new worker should take (``LEAKYPOOL_UID``); the pool
            counts the request as outstanding until a worker with this uid joins.
        env: Its settings as ``LEAKYPOOL_*`` variables (registry URL, uid,
            tags, capacity, idle timeout, and TLS paths when the provisioner
            has ``worker_tls``, as `CommandProvisioner(..., tls=...)` does).
        args: The same settings as ``leakypool-worker`` flags.
        seq: This pool's request number (0, 1, 2 ...): spreads workers over hosts.
    """

    uid: uuid.UUID
    env: Mapping[str, str]
    args: tuple[str, ...]
    seq: int = 0


@runtime_checkable
class Provisioner(Protocol):
    """Starts one worker per request, somewhere; the worker joins through discovery.

    ``provision`` MUST return once the worker is on its way (it need not
    wait for it to join) and MUST raise if it could not start one: the pool
    logs the error once per back-off, counts it (``leakypool_provision_failures_total``),
    and the waiting work keeps waiting. It MUST be safe to cancel.
    An optional ``async def aclose()`` runs when the pool closes.
    """

    async def provision(self, request: WorkerRequest) -> None:
        """Start one worker for ``request``."""
        ...


class SubprocessProvisioner:
    """Workers as subprocesses of the pool on this host: the default (``spawn=`` / ``max_workers=``).

    The pool keeps these in its own fleet: they join over a private unix
    socket as soon as they report READY, and exit after ``idle_timeout``.
    The pool asks through `grow` (synchronous: the fleet counts what it
    spawns, so no `WorkerRequest` is made or tracked); `provision` is the
    same for callers of the `Provisioner` protocol.
    """

    def __init__(self) -> None:
        self._fleet: LocalFleet | None = None

    def attach(self, fleet: LocalFleet) -> None:
        """Start workers into ``fleet`` (the pool does this)."""
        self._fleet = fleet

    def grow(self) -> bool:
        """Start one more local worker if the fleet has room; True if one is starting."""
        return self._fleet is not None and self._fleet.grow()

    async def provision(self, request: WorkerRequest) -> None:
        """Start one more local worker (up to the fleet's maximum); ``request`` is not needed.

        Raises:
            ProvisionError: not attached to an open pool, or the fleet is full.
        """
        if not self.grow():
            raise ProvisionError("SubprocessProvisioner: no pool fleet with room to start a worker in")

    def __repr__(self) -> str:
        return "SubprocessProvisioner()"


class CommandProvisioner:
    """Runs a command per requested worker.

    In each argument, ``{worker_args}`` becomes the worker's flags (an
    argument that is exactly ``{worker_args}`` becomes several arguments;
    inside a longer one, a shell-quoted string), ``{uid}`` its uid and
    ``{seq}`` the request number. The command also gets the worker's
    settings as ``LEAKYPOOL_*`` variables, on top of this process's
    environment (less its own ``LEAKYPOOL_*``, plus its ``sys.path`` as
    ``PYTHONPATH``), and ``env``.

    A command that exits within `SETTLE_S` is judged by its status: 0 is a
    worker on its way (``docker run -d``, ``kubectl run``); anything else
    is a `ProvisionError` quoting its stderr's tail. A command still running
    then *is* the worker (``ssh host leakypool-worker ...``): it is watched
    (a failure later is logged) and, when the pool closes, sent SIGTERM
    (the worker drains) and reaped.

    Args:
        argv: The command and its arguments.
        env: Extra variables for the command.
        settle: Seconds to wait for the command to exit (default `SETTLE_S`).
        tls: The worker's certificate, key and client CA, as paths *on the
            worker's host*: every request then carries them
            (``LEAKYPOOL_TLS_CERT`` / ``_KEY`` / ``_CLIENT_CA`` and ``--tls-*``
            in ``{worker_args}``), as a worker off loopback needs.

    Raises:
        ConfigError: ``argv`` is empty, or ``tls`` is not three non-empty paths.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        settle: float = SETTLE_S,
        tls: tuple[str, str, str] | None = None,
    ) -> None:
        if isinstance(argv, str) or not argv:
            raise ConfigError(f"CommandProvisioner: expected a non-empty list of arguments, got {argv!r}")
        if tls is not None and not _three_paths(tls):
            raise ConfigError(f"CommandProvisioner tls: expected (cert, key, client CA) paths, got {tls!r}")
        self.worker_tls: tuple[str, str, str] | None = None if tls is None else (tls[0], tls[1], tls[2])
        """The worker's TLS files on its host (cert, key, client CA), or None: the pool puts them in each request."""
        self.argv: tuple[str, ...] = tuple(argv)
        self._env = dict(env or {})
        self._settle = settle
        self._tasks = TaskOwner("command provisioner", _log)
        self._running: dict[int, subprocess.Popen[bytes]] = {}

    def command(self, request: WorkerRequest) -> list[str]:
        """The command line for ``request`` (placeholders filled in)."""
        out: list[str] = []
        for arg in self.argv:
            if arg == "{worker_args}":
                out.extend(request.args)
                continue
            arg = arg.replace("{worker_args}", shlex.join(request.args))
            out.append(arg.replace("{uid}", str(request.uid)).replace("{seq}", str(request.seq)))
        return out

    async def provision(self, request: WorkerRequest) -> None:
        """Run the command for ``request``.

        Raises:
            ProvisionError: it could not start, or exited with a non-zero status within ``settle``.
        """
        argv = self.command(request)
        process = await _start(argv, child_env(request.env) | self._env)
        try:
            tail = await _Tail.attach(process)
        except BaseException:  # cancelled (the pool closing) before anything watches it
            _abandon_process(process)
            raise
        self._running[process.pid] = process
        exited = watch_exit(process)
        settled_at = time.monotonic() + self._settle
        self._tasks.spawn(self._watch(process, exited, tail, request.uid, settled_at), name=f"command {process.pid}")
        done, _ = await asyncio.wait([exited], timeout=self._settle)  # cancelling this leaves the command to _watch
        if not done:
            return  # still running: it is the worker
        code = exited.result()
        if code != 0:
            await tail.finish()
            stderr = tail.text() or "(no stderr)"
            # the template, not the command run: the worker's flags carry the registry URL
            raise ProvisionError(f"command {self._template(200)} exited with status {code}: {stderr}")

    async def _watch(
        self,
        process: subprocess.Popen[bytes],
        exited: asyncio.Future[int],
        tail: _Tail,
        uid: uuid.UUID,
        settled_at: float,
    ) -> None:
        """Reap the command; log a failure after `provision` returned; on close, stop it (SIGTERM, then SIGKILL)."""
        try:
            code = await asyncio.shield(exited)
        except asyncio.CancelledError:
            try:
                await self._stop(process, exited)
            finally:
                self._running.pop(process.pid, None)
                tail.close()
            raise
        self._running.pop(process.pid, None)
        await tail.finish()
        if time.monotonic() >= settled_at and code not in (0, -signal.SIGTERM):
            _log.warning(
                "worker %s: its command (pid %s) exited with status %s: %s", uid, process.pid, code, tail.text()
            )

    @staticmethod
    async def _stop(process: subprocess.Popen[bytes], exited: asyncio.Future[int]) -> None:
        """SIGTERM (the worker drains), then SIGKILL after `STOP_GRACE_S`; reaped either way."""
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(exited), STOP_GRACE_S)
        except TimeoutError:
            _kill(process)
            await exited

    async def aclose(self) -> None:
        """Stop the commands still running (foreground workers), and reap them."""
        await self._tasks.aclose()

    @property
    def pids(self) -> list[int]:
        """Pids of the commands still running (foreground workers)."""
        return list(self._running)

    def _template(self, limit: int) -> str:
        """The command template as one line, passwords masked, cut at ``limit`` characters."""
        return redacted(shlex.join(self.argv))[:limit]

    def __repr__(self) -> str:
        return f"CommandProvisioner({self._template(80)!r})"


def _three_paths(tls: object) -> bool:
    """Whether ``tls`` is (cert, key, client CA): three non-empty strings."""
    return isinstance(tls, tuple | list) and len(tls) == 3 and all(isinstance(p, str) and p for p in tls)


async def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the command in a thread (fork and exec stay off the loop); cancelled, it is killed and reaped.

    Raises:
        ProvisionError: it could not start (no such program, not executable).
    """

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )

    starting = asyncio.get_running_loop().run_in_executor(None, popen)
    try:
        return await asyncio.shield(starting)
    except OSError as exc:
        raise ProvisionError(f"command {argv[0]!r} could not start: {exc}") from None
    except asyncio.CancelledError:
        starting.add_done_callback(_abandon)
        raise


def _abandon(starting: asyncio.Future[subprocess.Popen[bytes]]) -> None:
    """A command started for a request that was cancelled meanwhile: kill it, reap it in a thread."""
    if starting.cancelled() or starting.exception() is not None:
        return
    _abandon_process(starting.result())


def _abandon_process(process: subprocess.Popen[bytes]) -> None:
    """Kill a command nothing will watch, and reap it in a thread (the loop may be closing)."""
    _kill(process)
    if process.stderr is not None:
        process.stderr.close()
    threading.Thread(target=process.wait, name="leakypool-reap", daemon=True).start()


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()


class _Tail(asyncio.Protocol):
    """Reads a command's stderr as it comes (so the pipe never fills) and keeps its last bytes."""

    def __init__(self) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._transport: asyncio.BaseTransport | None = None
        self._eof = asyncio.get_running_loop().create_future()

    @classmethod
    async def attach(cls, process: subprocess.Popen[bytes]) -> _Tail:
        tail = cls()
        assert process.stderr is not None  # noqa: S101 - an invariant, stated for the type checker
        tail._transport, _ = await asyncio.get_running_loop().connect_read_pipe(lambda: tail, process.stderr)
        return tail

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        while self._size - len(self._chunks[0]) >= STDERR_TAIL_BYTES:
            self._size -= len(self._chunks.popleft())

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._eof.done():
            self._eof.set_result(None)

    async def finish(self) -> None:
        """Wait (briefly: a detached grandchild may hold the pipe) for the rest of stderr, then close."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._eof), TAIL_WAIT_S)
        self.close()

    def text(self) -> str:
        """The last lines of stderr, on one line, passwords masked (``sh -x`` and ``docker`` echo their arguments)."""
        raw = b"".join(self._chunks)[-STDERR_TAIL_BYTES:].decode(errors="replace")
        return redacted(" | ".join(line.strip() for line in raw.strip().splitlines() if line.strip()))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None


public(CommandProvisioner, Provisioner, SubprocessProvisioner, WorkerRequest)
