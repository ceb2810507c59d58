"""WorkerPool: the workers a process dispatches routines to, for the duration of an ``async with``.

The pool is the public surface that wires the layers below together:

    LocalFleet (_fleet) ──on READY──> Membership (_dispatch) ──> Roster: what balancers see
    discovery (_discovery) ──events──┘
    routine call ──> CallPath (_dispatch): admission, limits, queue, placement ──> a worker's stream (_transport)
    Scheduler (_jobs): the store's jobs, placed through the same CallPath
    PoolObserver (_observe): /metrics, /status, read from all of the above

Every background task (the admission pump, relays of nested calls,
discovery, closing connections) belongs to the pool's `TaskOwner`, which
cancels and awaits them on exit.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Self

from backpressure import BackpressureLike
from balancer import LoadBalancerLike, RoundRobinLoadBalancer

from .._base._public import public
from .._base._tasks import TaskOwner
from .._call._calls import RemoteGenerator, call_routine
from .._call._connection import WorkerConnection
from .._call._dispatcher import closed, opened, reset_dispatcher, set_dispatcher
from .._call._task import Task
from .._config._places import default_secret_file
from .._config._settings import POOL_SETTINGS, PoolConfig
from .._discovery import DiscoveryLike
from .._dispatch._admission import Admission
from .._dispatch._membership import Membership
from .._dispatch._path import CallPath
from .._dispatch._placement import Placement
from .._dispatch._relay import NestedHost
from .._errors import PoolClosed
from .._fleet._provisioning import Provisioner, pool_capacity
from .._transport._outgoing import OutgoingCall
from .._transport._secret import SecretSource, spawn_key
from .._transport._tls import TlsCredentials
from .._transport._trust import Trust
from ._executors import PoolExecutors
from ._jobs import PoolJobs, job_scheduler
from ._views import PoolViews

if TYPE_CHECKING:
    from .._jobs import JobStore, Scheduler
    from .._observe._observer import PoolObserver

_log = logging.getLogger("leakypool.pool")

POOL_SETTING_NAMES = frozenset(s.name for s in POOL_SETTINGS)
"""`WorkerPool` arguments that are settings (each also read from its ``LEAKYPOOL_*`` variable)."""


class WorkerPool(PoolJobs, PoolExecutors, PoolViews):
    """Worker processes to run routines on, for the duration of an ``async with``.

    Inside the block, calling a ``@pool.routine`` dispatches it to one of
    this pool's workers (the innermost pool wins when pools nest). Every
    argument left as None is read from ``LEAKYPOOL_*`` (see docs/configuration.md), then
    defaults.

    Args:
        spawn: Local worker subprocesses to start and keep. Default: one
            per CPU; none when only ``discovery`` is given.
        discovery: A discovery backend (`LanDiscovery`, `LocalDiscovery`,
            `StaticDiscovery`); its workers join the pool as it finds them
            (`wait_for_workers` waits for them), are refreshed when they
            change, and leave when they withdraw.
        tags: Admit only discovered workers that carry all these tags.
        credentials: `TlsCredentials` for workers that serve TLS (a worker
            that does, found without them, is not admitted).
        backpressure: Hook shipped to the workers this pool spawns (each
            runs it on every incoming task); None accepts everything.
        loadbalancer: Orders workers per dispatch; default ``RoundRobinLoadBalancer()``.
        queue_depth: Calls that may wait in FIFO order for a worker when
            none has room; 0 (default) fails them at once with NoWorkersAvailable.
        admission_timeout: Seconds a call waits for a place in a full queue
            before AdmissionRejected (default 0.3).
        dispatch_deadline: Seconds a call may wait (for limits or a worker)
            before it fails with CapacityTimeout (default 300).
        max_pending: Calls admitted at once, running + waiting; beyond it,
            AdmissionRejected at once (default: no ceiling).
        max_workers: Local workers the pool may grow to while calls wait for
            a worker (default: ``spawn``, no growth).
        idle_timeout: Seconds a worker grown under load idles before it exits.
        hold_slot_while_waiting: Spawned workers count a task that awaits a
            nested routine call against backpressure (default False).
        startup_timeout: Seconds a spawned worker gets to report READY.
        shutdown_grace: On exit, seconds in-flight calls get to finish
            before workers are killed.
        store: The job store for durable jobs (`Routine.submit`): a URL
            (``sqlite:///PATH``, ``postgresql://...``) or a `pool.JobStore`.
            Default: none (``LEAKYPOOL_STORE``); then ``submit`` raises ConfigError.
        lease_ttl: Seconds this process's hold on its jobs lasts without
            renewal: after a crash, its jobs are re-queued that long later.
        keep_finished: Seconds finished jobs are kept, then purged (default 7 days; 0: forever).
        local_transport: How the pool reaches the workers it spawns:
            ``"unix"`` (default; a unix socket in a private directory, no
            port) or ``"tcp"`` (127.0.0.1).
        worker_template: Fork spawned workers from one preloaded template
            process (default True): N workers cost one interpreter start.
        template_fork: Fork that template from this process when it runs no
            other thread and is under 256 MiB resident (default True): then
            not even one interpreter starts. The template and workers share
            this process's memory pages until they write them. False: the
            template is a fresh interpreter.
        store_retry: Seconds store calls retry a lost connection before
            StoreError (default 10).
        metrics_port: Serve the page (``/``), ``/metrics`` (Prometheus) and
            ``/status`` (JSON) at this port (0: any free port, see
            `metrics_address`). Needs the ``metrics`` extra. Default: off.
        metrics_host: The address ``metrics_port`` binds (default 127.0.0.1);
            off loopback it needs ``metrics_token``.
        metrics_names: Host names, besides IP addresses and ``localhost``, a request
            to ``metrics_port`` may give as its ``Host`` (others are refused: DNS rebinding).
        metrics_token: A token every request to ``metrics_port`` must carry
            (``Authorization: Bearer TOKEN`` or ``?token=``).
        provisioner: Where workers beyond ``spawn`` come from when calls or
            jobs find none with room, up to ``max_workers`` (default: local
            subprocesses; see docs/capacity.md).
        provision_timeout: Seconds a requested worker counts toward
            ``max_workers`` until it joins (default 120).
        initializer: Called as ``initializer(*initargs)`` once in each spawned
            worker before its first call (plain or ``async def``; pickled by
            value where the worker cannot import it). If it raises, entering
            the pool raises `WorkerInitError` (its exception as ``__cause__``).
        initargs: Arguments for ``initializer``.
        max_tasks_per_worker: A spawned worker recycles after this many calls
            (each worker's limit drawn in [N, 1.1 N]): it stops accepting,
            finishes what it runs, exits and is replaced; no call fails for it.
        max_memory_per_worker: A spawned worker recycles the same way once a
            call leaves it this far above its resident memory when it became
            ready: bytes, or a string such as ``"512MiB"``, ``"2GiB"``, ``"500MB"``.
        plain_prefetch: Plain calls a busy worker holds accepted behind the one
            it runs, so it starts the next without a round trip (default 2; 0:
            a busy worker turns them away). A routine's ``prefetch=0`` opts out.
        secret: The secret this pool proves itself with to workers it did not
            spawn, and which they must prove they hold (``LEAKYPOOL_SECRET``;
            several, whitespace-separated, while one is rotated; default: read
            from ``secret_file``). Workers a provisioner starts get it too.
            Spawned workers get a key of this pool's own. See docs/lan-security.md.
        secret_file: A file holding it, one per line (``LEAKYPOOL_SECRET_FILE``;
            default: this user's own, ``~/.config/leakypool/secret``, which
            workers of the same user make and require by default).
        insecure: Dial workers off loopback without TLS when the pool has no
            ``credentials`` (``LEAKYPOOL_INSECURE``): anyone on the path can
            then read and change every frame. Default False: such workers are skipped.
        peer_uids: Local users besides this one whose workers (unix socket,
            loopback) this pool may dial (``LEAKYPOOL_PEER_UIDS``; default none).
        use_env: Read unset settings from ``LEAKYPOOL_*`` variables.

    Raises:
        ConfigError: an invalid setting (here or in the environment).
        TypeError: ``initializer`` is not callable.
    """

    def __init__(
        self,
        spawn: int | None = None,
        *,
        discovery: DiscoveryLike | None = None,
        tags: Iterable[str] = (),
        credentials: TlsCredentials | None = None,
        backpressure: BackpressureLike | None = None,
        loadbalancer: LoadBalancerLike | None = None,
        queue_depth: int | None = None,
        admission_timeout: float | None = None,
        dispatch_deadline: float | None = None,
        max_pending: int | None = None,
        max_workers: int | None = None,
        idle_timeout: float | None = None,
        hold_slot_while_waiting: bool | None = None,
        startup_timeout: float | None = None,
        shutdown_grace: float | None = None,
        store: str | JobStore | None = None,
        lease_ttl: float | None = None,
        metrics_port: int | None = None,
        metrics_host: str | None = None,
        metrics_token: str | None = None,
        metrics_names: Iterable[str] | None = None,
        provisioner: Provisioner | None = None,
        provision_timeout: float | None = None,
        local_transport: str | None = None,
        worker_template: bool | None = None,
        template_fork: bool | None = None,
        keep_finished: float | None = None,
        store_retry: float | None = None,
        initializer: Callable[..., Any] | None = None,
        initargs: Iterable[Any] = (),
        max_tasks_per_worker: int | None = None,
        max_memory_per_worker: int | str | None = None,
        plain_prefetch: int | None = None,
        secret: str | None = None,
        secret_file: str | None = None,
        insecure: bool | None = None,
        peer_uids: Iterable[int] | None = None,
        use_env: bool = True,
    ) -> None:
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        tags = frozenset(tags)  # read once: admission and the spawned workers both use it (a generator would be spent)
        settings = {name: value for name, value in locals().items() if name in POOL_SETTING_NAMES}
        settings["store"] = store if isinstance(store, str) else None  # a JobStore object is not a setting
        config = PoolConfig.from_env(os.environ if use_env else None, **settings)
        self._config = config
        automatic = 0 if discovery is not None or provisioner is not None else os.cpu_count() or 1
        minimum = config.spawn if config.spawn is not None else automatic
        self._discovery = discovery
        self._tasks = TaskOwner("pool", _log)
        secret_source = SecretSource(config.secret, config.secret_file, default_path=default_secret_file())
        own_key = spawn_key()  # the workers this pool spawns prove themselves with it, and it to them
        self._membership = Membership(
            NestedHost(self, self._tasks),
            credentials=credentials,
            trust=Trust.of(own_key, source=secret_source, peer_uids=config.peer_uids),
            insecure=config.insecure,
            spawn=lambda coro, name: self._tasks.spawn(coro, name=name),
            tags=tags,
            changed=self._capacity_changed,
            close=self._close_connections,
            is_local=lambda uid: uid in self._fleet,
            broken_local=lambda uid: self._fleet.replace(uid),
        )
        self._roster = self._membership.roster
        self._fleet, self._growth = pool_capacity(
            config,
            backpressure,
            provisioner,
            minimum=minimum,
            provision_timeout=config.provision_timeout,
            tags=tags,
            members=lambda: self._roster.workers.keys(),
            registry=getattr(discovery, "worker_url", ""),
            on_ready=self._membership.admit,
            on_exit=lambda uid, why: self._close_connections(self._membership.evict(uid, why)),
            initializer=None if initializer is None else (initializer, tuple(initargs)),
            secret=secret_source,
            spawn_key=own_key,
        )
        self._fleet.changed = self._capacity_changed
        placement = Placement(
            loadbalancer if loadbalancer is not None else RoundRobinLoadBalancer(),
            self._roster,
            self._membership,
            self._close_connections,
            plain_prefetch=config.plain_prefetch,
        )
        placement.overdue = lambda uid: self._fleet.retire(uid, "timeout")
        self._admission = Admission(
            placement,
            self._tasks,
            self._growth.grow,
            queue_depth=config.queue_depth,
            admission_timeout=config.admission_timeout,
            max_pending=config.max_pending,
            coming=lambda: self._fleet.coming(placement.draining),
            stranded=lambda: None if len(self._roster) else self._fleet.stranded(),
        )
        placement.waiting = lambda: bool(self._admission.waiting)
        self._path = CallPath(
            self._admission,
            default_deadline=config.dispatch_deadline,
            capacity_changed=self._capacity_changed,
            workers=lambda: len(self._roster),
        )
        self._scheduler: Scheduler | None = job_scheduler(
            store, config, self._path, self._growth.grow, lambda: len(self._roster) > 0 or self._growth.maximum > 0
        )
        self._token: Any = None
        self._observer: PoolObserver | None = None
        if config.metrics_port is not None:
            from .._observe._observer import PoolObserver  # prometheus-client loads only for a pool with metrics

            self._observer = PoolObserver(
                self, config.metrics_port, config.metrics_host, config.metrics_token, config.metrics_names
            )
            self._path.metrics = self._observer.metrics

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._path.state != "new":
            raise PoolClosed("a WorkerPool can be entered once; make a new one")
        self._path.state = "starting"
        try:
            await self._fleet.prepare()  # first: the template forks only while no thread (a store's) runs
            if self._scheduler is not None:
                await self._scheduler.store.open()  # a bad store fails here, before any worker starts
            await self._fleet.start()
            if self._scheduler is not None:
                await self._scheduler.start()
            if self._observer is not None:
                await self._observer.start()
        except BaseException:
            await self._shutdown()
            raise
        if self._discovery is not None:
            self._tasks.spawn(self._membership.follow(self._discovery), name="discovery")
        self._path.state = "open"
        self._token = set_dispatcher(self)
        opened(self)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        closed(self)
        if self._token is not None:
            try:
                reset_dispatcher(self._token)
            except ValueError:
                pass  # exited in another context than entered; nothing to undo here
            self._token = None
        await self._shutdown()

    async def _shutdown(self) -> None:
        """Stop the workers we spawned (reaping them even if cancelled), close connections."""
        self._path.state = "closed"
        self._admission.close(PoolClosed("the pool closed while the call waited for a worker"))
        if self._observer is not None:
            await self._observer.aclose()
        async with contextlib.AsyncExitStack() as stack:  # each step runs even if one before it fails
            stack.push_async_callback(self._tasks.aclose)
            stack.push_async_callback(self._membership.close)
            if self._scheduler is not None:
                self._scheduler.stop_leasing()
                stack.push_async_callback(self._scheduler.store.close)
                stack.push_async_callback(self._scheduler.aclose)
            stack.push_async_callback(self._growth.aclose)
            await self._fleet.stop()  # workers drain: running jobs record their outcomes meanwhile

    def _close_connections(self, connections: Iterable[WorkerConnection]) -> None:
        for connection in connections:
            if self._tasks.closed:
                continue  # shutting down: Membership.close closes every connection
            self._tasks.spawn(connection.close(), name=f"close {connection.metadata.uid}")

    # -- membership --------------------------------------------------------------

    async def wait_for_workers(self, count: int = 1, timeout: float | None = None) -> None:
        """Wait until the pool has at least ``count`` workers (e.g. discovered ones).

        Raises:
            TimeoutError: not enough workers joined within ``timeout`` seconds.
        """
        await self._membership.until(lambda: len(self._roster) >= count, timeout)

    # -- dispatch ----------------------------------------------------------------

    def call(self, task: Task) -> Any:
        """Run a coroutine routine's task; see `pool.routine`."""
        return call_routine(self._path, task)

    def generator(self, task: Task) -> RemoteGenerator:
        """Run an async-generator routine's task; see `pool.routine`."""
        return RemoteGenerator(self._path, task)

    async def dispatch(self, task: Task, parent: OutgoingCall | None = None) -> OutgoingCall:
        """Admit ``task``, take its limit slots, and get a worker to accept it.

        Args:
            task: The call.
            parent: For a call a routine made from inside a worker (nested
                dispatch), the call running that routine: its limit slots
                are its children's to borrow, and a cycle is a `Deadlock`.

        Raises:
            PoolClosed: the pool is not open.
            AdmissionRejected: over the ceiling, or the queue stayed full.
            NoWorkersAvailable: no worker accepted it and there is no queue.
            CapacityTimeout: it waited past the dispatch deadline.
            Deadlock: it needs a slot only its own callers hold.
            WorkflowHalted: an earlier call of its workflow failed (halt_on_error).
        """
        return await self._path.dispatch(task, parent)

    def _capacity_changed(self) -> None:
        self._growth.changed()
        self._admission.capacity_changed()
        if self._scheduler is not None:
            self._scheduler.capacity_changed()

    def __repr__(self) -> str:
        return f"<WorkerPool {self._path.state} [{self.stats().summary()}]>"


public(WorkerPool)
