"""WorkerPool: the workers a process dispatches routines to, and the dispatch loop.

    routine call ──> Task ──> WorkerPool.start(task)
                                 │
                                 │  balancer.delegate(task, context=members)
                                 v
                     ┌── candidate uid ──> connection.start(task) ──> Accept ──> OutgoingCall
                     │                          │
                     │       WorkerRejected ────┤ (transient: keep the worker)
                     │       WorkerBroken ──────┘ (hard code: evict first)
                     └──── athrow(exc) ── next candidate ... generator ends
                                 │
                                 v
                       NoWorkersAvailable

Membership comes from two places: workers this pool spawns (local
subprocesses it starts, watches, replaces when they crash and reaps), and
workers a discovery backend reports. Both land in `Members`, the read-only
view the balancer sees.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

import grpc

from balancer import LoadBalancerLike, RoundRobinLoadBalancer
from backpressure import BackpressureLike, TaskCountBackpressure

from . import _wire
from ._calls import TRANSIENT_CODES, RemoteGenerator, Task, call_routine
from ._config import PoolConfig, WorkerConfig
from ._connection import WorkerConnection, WorkerMetadata
from ._errors import NoWorkersAvailable, PoolClosed, WorkerBroken, WorkerRejected
from ._ids import new_uid
from ._local_worker import LocalWorker
from ._members import Members
from ._relay import NestedHost
from ._routine import reset_dispatcher, set_dispatcher
from ._session import OutgoingCall

_log = logging.getLogger("leakypool.pool")

RESPAWN_BACKOFF_S: Final[tuple[float, ...]] = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Delay before replacing a crashed worker, by how many crashed in a row.

A worker that dies within `CRASH_WINDOW_S` of its start counts towards a
crash loop; one that lived longer resets the count.
"""

CRASH_WINDOW_S: Final[float] = 10.0
"""A worker that exits sooner than this after starting counts as a crash loop."""


class WorkerPool:
    """Worker processes to run routines on, for the duration of an ``async with``.

    Inside the block, calling a ``@pool.routine`` dispatches it to one of
    this pool's workers (the innermost pool wins when pools nest).

    Args:
        spawn: Local worker subprocesses to start and keep. Default: one
            per CPU; none when only ``discovery`` is given.
        discovery: A discovery backend (`LanDiscovery`, `LocalDiscovery`,
            `StaticDiscovery`); its workers join the pool.
        backpressure: Hook shipped to the workers this pool spawns (each
            runs it on every incoming task); None accepts everything.
        loadbalancer: Orders workers per dispatch; default
            ``RoundRobinLoadBalancer()``.
        startup_timeout: Seconds a spawned worker gets to report READY.
        shutdown_grace: On exit, seconds in-flight calls get to finish
            before workers are killed.
        use_env: Read unset settings from ``LEAKYPOOL_*`` variables.

    Raises:
        ConfigError: an invalid setting (here or in the environment).
    """

    def __init__(
        self,
        spawn: int | None = None,
        *,
        discovery: Any = None,
        backpressure: BackpressureLike | None = None,
        loadbalancer: LoadBalancerLike | None = None,
        startup_timeout: float | None = None,
        shutdown_grace: float | None = None,
        use_env: bool = True,
    ) -> None:
        self._config = PoolConfig.from_env(
            os.environ if use_env else None,
            spawn=spawn,
            startup_timeout=startup_timeout,
            shutdown_grace=shutdown_grace,
        )
        if self._config.spawn is not None:
            self._spawn = self._config.spawn
        else:
            self._spawn = 0 if discovery is not None else (os.cpu_count() or 1)
        self._discovery = discovery
        self._backpressure = backpressure
        self._worker_env = _worker_env(backpressure, self._config.shutdown_grace)
        self._balancer: LoadBalancerLike = loadbalancer if loadbalancer is not None else RoundRobinLoadBalancer()
        self._members = Members()
        self._host = NestedHost(self)
        self._local: dict[uuid.UUID, LocalWorker] = {}
        self._watchers: set[asyncio.Task[None]] = set()
        self._crashes = 0
        self._membership = asyncio.Condition()
        self._token: Any = None
        self._state = "new"
        self._dispatched = 0

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> WorkerPool:
        if self._state != "new":
            raise PoolClosed("a WorkerPool can be entered once; make a new one")
        self._state = "starting"
        try:
            results = await asyncio.gather(
                *(self._spawn_worker() for _ in range(self._spawn)), return_exceptions=True
            )
            failures = [r for r in results if isinstance(r, BaseException)]
            if failures:
                raise failures[0]
        except BaseException:
            await self._shutdown()
            raise
        self._state = "open"
        self._token = set_dispatcher(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._token is not None:
            try:
                reset_dispatcher(self._token)
            except ValueError:
                pass  # exited in another context than entered; nothing to undo here
            self._token = None
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop every worker we spawned (reaping them even if cancelled), close connections."""
        self._state = "closed"
        work = asyncio.ensure_future(self._stop_everything())
        try:
            await asyncio.shield(work)
        except asyncio.CancelledError:
            # Cancelled mid-shutdown: still never leave a child behind.
            for worker in list(self._local.values()):
                await worker.kill()
            raise

    async def _stop_everything(self) -> None:
        for watcher in list(self._watchers):
            watcher.cancel()
        grace = self._config.shutdown_grace
        await asyncio.gather(*(w.stop(grace) for w in self._local.values()), return_exceptions=True)
        self._local.clear()
        for uid in list(self._members.ascending_uids):
            connection = self._members.remove(uid)
            if connection is not None:
                await connection.close()

    async def _spawn_worker(self) -> LocalWorker:
        uid = new_uid()
        worker = LocalWorker(uid, self._worker_env | {"LEAKYPOOL_UID": str(uid)})
        self._local[uid] = worker
        try:
            metadata = await worker.start(self._config.startup_timeout)
        except BaseException:
            self._local.pop(uid, None)
            raise
        self._admit(metadata)
        watcher = asyncio.ensure_future(self._watch(worker))
        self._watchers.add(watcher)
        watcher.add_done_callback(self._watchers.discard)
        return worker

    async def _watch(self, worker: LocalWorker) -> None:
        """Drop a spawned worker when it exits; replace it if it died unasked."""
        started = time.monotonic()
        code = await worker.wait()
        self._local.pop(worker.uid, None)
        self._evict(worker.uid, f"exited with status {code}")
        if worker.stopping or self._state != "open":
            return
        _log.warning("worker %s (pid %s) died with status %s; replacing it", worker.uid, worker.pid, code)
        self._crashes = self._crashes + 1 if time.monotonic() - started < CRASH_WINDOW_S else 0
        await asyncio.sleep(RESPAWN_BACKOFF_S[min(self._crashes, len(RESPAWN_BACKOFF_S) - 1)])
        if self._state == "open":
            try:
                await self._spawn_worker()
            except Exception:
                _log.exception("could not replace worker %s", worker.uid)

    def _admit(self, metadata: WorkerMetadata, credentials: grpc.ChannelCredentials | None = None) -> None:
        self._members.add(WorkerConnection(metadata, self._host, credentials))
        self._membership_changed()

    def _evict(self, uid: uuid.UUID, why: str) -> None:
        connection = self._members.remove(uid)
        if connection is not None:
            _log.info("worker %s left the pool: %s", uid, why)
            asyncio.ensure_future(connection.close())
            self._membership_changed()

    def _membership_changed(self) -> None:
        async def notify() -> None:
            async with self._membership:
                self._membership.notify_all()

        asyncio.ensure_future(notify())

    async def wait_for_workers(self, count: int = 1, timeout: float | None = None) -> None:
        """Wait until the pool has at least ``count`` workers (e.g. discovered ones).

        Raises:
            TimeoutError: not enough workers joined within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            async with self._membership:
                await self._membership.wait_for(lambda: len(self._members) >= count)

    # -- dispatch ----------------------------------------------------------------

    def call(self, task: Task) -> Any:
        """Run a coroutine routine's task; see `pool.routine`."""
        return call_routine(self, task)

    def generator(self, task: Task) -> RemoteGenerator:
        """Run an async-generator routine's task; see `pool.routine`."""
        return RemoteGenerator(self, task)

    async def start(self, task: Task) -> OutgoingCall:
        """Offer ``task`` to workers in the balancer's order until one accepts.

        Raises:
            PoolClosed: the pool is not open.
            NoWorkersAvailable: no worker accepted it.
        """
        if self._state != "open":
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is {self._state}")
        delegation = self._balancer.delegate(task, context=self._members)
        last: BaseException | None = None
        try:
            uid = await anext(delegation)
            while True:
                connection = self._members.get(uid)
                if connection is None:  # left the pool since the balancer looked
                    uid = await delegation.asend(None)
                    continue
                try:
                    call = await connection.start(task)
                except (WorkerRejected, WorkerBroken) as exc:
                    last = exc
                    if exc.code not in TRANSIENT_CODES:
                        self._evict(uid, str(exc))
                    uid = await delegation.athrow(exc)
                    continue
                self._dispatched += 1
                try:
                    await delegation.asend(uid)
                except StopAsyncIteration:
                    return call
                call.cancel()
                raise RuntimeError(f"{self._balancer!r} offered another worker after a success")
        except StopAsyncIteration:
            pass
        finally:
            await delegation.aclose()
        if not self._members:
            raise NoWorkersAvailable(f"no worker to run {task.name}(): the pool is empty") from last
        raise NoWorkersAvailable(f"no worker accepted {task.name}(): {len(self._members)} busy or unavailable") from last

    # -- introspection -------------------------------------------------------------

    @property
    def workers(self) -> Mapping[uuid.UUID, WorkerMetadata]:
        """The pool's workers now, by uid (a snapshot)."""
        return {uid: entry[0] for uid, entry in self._members.workers.items()}

    @property
    def pids(self) -> list[int]:
        """Pids of the worker processes this pool spawned and still runs."""
        return [w.pid for w in self._local.values() if w.pid is not None and w.returncode is None]

    async def worker_states(self, timeout: float = 5.0) -> dict[uuid.UUID, Any]:
        """Each worker's own report (State RPC): in flight, idle seconds, capacity...

        Workers that do not answer within ``timeout`` are left out.
        """
        connections = list(self._members.connections())
        answers = await asyncio.gather(*(c.state(timeout) for c in connections), return_exceptions=True)
        return {
            c.metadata.uid: answer
            for c, answer in zip(connections, answers, strict=True)
            if not isinstance(answer, BaseException)
        }

    def in_flight(self) -> int:
        """Calls dispatched through this pool that have not ended."""
        return sum(c.in_flight for c in self._members.connections())

    def __repr__(self) -> str:
        local = sum(1 for w in self._members.workers.values() if w[0].local)
        return (
            f"<WorkerPool {self._state} [Workers: {len(self._members)} ({local} local) | "
            f"Calls: {self.in_flight()} in flight, {self._dispatched} dispatched]>"
        )


def _worker_env(backpressure: BackpressureLike | None, shutdown_grace: float) -> dict[str, str]:
    """Settings for the workers a pool spawns, as ``LEAKYPOOL_*`` variables."""
    if isinstance(backpressure, TaskCountBackpressure):
        capacity, shipped = backpressure.threshold, ""
    elif backpressure is None:
        capacity, shipped = 0, ""
    else:
        blob = _wire.dumps(backpressure, what=f"backpressure hook {backpressure!r}")
        capacity, shipped = 0, base64.b64encode(blob).decode()
    config = WorkerConfig(
        max_concurrent_tasks=capacity, backpressure=shipped, shutdown_grace=shutdown_grace, log_level="WARNING"
    )
    return config.to_env()
