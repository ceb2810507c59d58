"""WorkerPool: the workers a process dispatches routines to, for the duration of an ``async with``.

The pool is the public surface over the layers it wires together (`_layers.Layers`: membership, the
fleet, the call path, the scheduler) and owns the objects that serve the rest of its methods: its
jobs (`_jobs`), executors (`_executors`) and views (`_views`). Every background task (the admission
pump, relays of nested calls, discovery, closing connections) belongs to the layers' `TaskOwner`,
which cancels and awaits them on exit.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from backpressure import BackpressureLike
from balancer import LoadBalancerLike

from .._base import public
from .._call import CallRecord, RemoteGenerator, closed, opened, reset_dispatcher, set_dispatcher
from .._config import POOL_SETTINGS, PoolConfig
from .._discovery import DiscoveryLike
from .._errors import PoolClosed
from .._executor import Feed, PoolExecutor
from .._fleet import Provisioner
from .._observe import PoolDebug, PoolStats
from .._routine import CallOptions, Routine
from .._transport import OutgoingCall, TlsCredentials, WorkerMetadata
from .._transport import leakypool_pb2 as pb
from ._executors import PoolExecutors
from ._jobs import PoolJobs
from ._layers import Layers
from ._views import PoolViews

if TYPE_CHECKING:
    from .._jobs import Job, Jobs, JobStore
    from .._observe import PoolObserver

_log = logging.getLogger("leakypool.pool")

POOL_SETTING_NAMES = frozenset(s.name for s in POOL_SETTINGS)
"""`WorkerPool` arguments that are settings (each also read from its ``LEAKYPOOL_*`` variable)."""


class WorkerPool:
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
            renewal: after a crash, its jobs are re-queued that long later. Jobs
            start here only while a third of it is surely left (docs/jobs.md).
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
        max_threads_per_worker: Native threads (BLAS, OpenMP) each spawned
            worker's libraries may use (``LEAKYPOOL_MAX_THREADS_PER_WORKER``;
            default: CPUs // ``spawn``, as joblib's loky does; 0: no cap).
            ``OMP_NUM_THREADS`` and the like, set in this process's
            environment, win for their library.
        build: The build of the code this process runs, a deployment's build id
            such as a git commit or an image tag (``LEAKYPOOL_BUILD``; default
            none). Its calls run only on workers of that build, its jobs keep
            it (`routine`'s ``pinned``), and its spawned workers run it. See
            docs/concepts.md, "Rolling deploys".
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
        max_threads_per_worker: int | None = None,
        build: str | None = None,
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
        self._discovery = discovery
        self._layers = layers = Layers(
            config,
            discovery_url=getattr(discovery, "worker_url", ""),
            tags=tags,
            credentials=credentials,
            backpressure=backpressure,
            loadbalancer=loadbalancer,
            provisioner=provisioner,
            initializer=None if initializer is None else (initializer, tuple(initargs)),
            store=store,
            automatic=0 if discovery is not None or provisioner is not None else os.cpu_count() or 1,
        )
        self._jobs = PoolJobs(layers)
        self._executors = PoolExecutors(layers)
        self._views = PoolViews(layers)
        self._token: Any = None
        self._observer: PoolObserver | None = None
        if config.metrics_port is not None:
            from .._observe import PoolObserver

            self._observer = PoolObserver(
                self, config.metrics_port, config.metrics_host, config.metrics_token, config.metrics_names
            )
            layers.path.metrics = self._observer.metrics

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> Self:
        layers = self._layers
        if layers.path.state != "new":
            raise PoolClosed("a WorkerPool can be entered once; make a new one")
        layers.path.state = "starting"
        try:
            await layers.start()
            if self._observer is not None:
                await self._observer.start()
        except BaseException:
            await self._shutdown()
            raise
        if self._discovery is not None:
            adopt = getattr(self._discovery, "adopt_secret", None)
            if adopt is not None:  # a StoreDiscovery admits only records sealed with the pool's secret (issue 51)
                adopt(layers.secret_source.secrets, layers.secret_source.describe())
            layers.tasks.spawn(layers.membership.follow(self._discovery), name="discovery")
        layers.path.state = "open"
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
        self._layers.path.close(PoolClosed("the pool closed while the call waited for a worker"))
        if self._observer is not None:
            await self._observer.aclose()
        await self._layers.stop()

    # -- membership --------------------------------------------------------------

    async def wait_for_workers(self, count: int = 1, timeout: float | None = None) -> None:
        """Wait until the pool has at least ``count`` workers (e.g. discovered ones).

        Raises:
            TimeoutError: not enough workers joined within ``timeout`` seconds.
        """
        await self._layers.membership.until(lambda: len(self._layers.roster) >= count, timeout)

    # -- dispatch ----------------------------------------------------------------

    def call(self, task: CallRecord) -> Any:
        """Run a coroutine routine's task; see `pool.routine`."""
        return self._layers.path.call(task)

    def generator(self, task: CallRecord) -> RemoteGenerator:
        """Run an async-generator routine's task; see `pool.routine`."""
        return RemoteGenerator(self._layers.path, task)

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
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
        return await self._layers.path.dispatch(task, parent)

    # -- jobs (`_jobs.PoolJobs`) ----------------------------------------------------

    @property
    def has_store(self) -> bool:
        """Whether the pool has a job store (``store=`` / ``LEAKYPOOL_STORE``)."""
        return self._jobs.has_store

    @property
    def jobs(self) -> Jobs:
        """The pool's durable jobs: ``await pool.jobs.get(id)``, ``.list(state)``, ``.counts()``, ``.pause(queue)``.

        Raises:
            ConfigError: the pool has no store (``store=`` / ``LEAKYPOOL_STORE``).
        """
        return self._jobs.jobs

    def submit(self, task: CallRecord, options: CallOptions) -> Coroutine[Any, Any, Job]:
        """Commit a job for ``task`` (see `pool.Routine.submit`): await it.

        Raises:
            PoolClosed: the pool is not open.
        """
        return self._jobs.submit(task, options)

    def schedule(
        self,
        routine: Routine[Any, Any],
        cron: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        tz: str = "UTC",
    ) -> str:
        """Run ``routine(*args, **kwargs)`` as a job at every slot of ``cron``; returns the schedule's name.

        Every process on the store may schedule the same thing: each slot runs once in all. See
        `PoolJobs.schedule` for the rules, and docs/jobs.md. Needs the ``cron`` extra.

        Raises:
            ConfigError: no store, a pool not open, a bad expression or zone, croniter missing.
            SerializationError: an argument cannot be pickled.
        """
        return self._jobs.schedule(routine, cron, args, kwargs, tz=tz)

    # -- executors (`_executors.PoolExecutors`) ---------------------------------------

    def executor(self) -> PoolExecutor:
        """A ``concurrent.futures.Executor`` over this open pool, for ``loop.run_in_executor`` and libraries.

        Call it on the pool's loop, inside the ``async with``. Its ``submit`` never blocks and queues
        without limit; its ``shutdown`` leaves the pool open; when the pool closes, its unfinished
        work ends in `PoolClosed` (see docs/from-concurrent-futures.md).

        Raises:
            PoolClosed: the pool is not open.
        """
        return self._executors.executor()

    # -- views (`_views.PoolViews`) ---------------------------------------------------

    def stats(self) -> PoolStats:
        """Load now: calls running and waiting, overall and per queue, key and workflow."""
        return self._views.stats()

    def debug(self) -> PoolDebug:
        """What the pool holds inside now, for diagnosis and tests: marks, crash counts, its template, paused queues."""
        return self._views.debug()

    @property
    def workers(self) -> Mapping[uuid.UUID, WorkerMetadata]:
        """The pool's workers now, by uid (a snapshot)."""
        return self._views.workers

    @property
    def pids(self) -> list[int]:
        """Pids of the worker processes this pool spawned and still runs."""
        return self._views.pids

    async def worker_states(self, timeout: float = 5.0) -> dict[uuid.UUID, pb.WorkerState]:
        """Each worker's own report (State RPC): in flight, idle seconds, capacity... (those that answer in ``timeout``)."""
        return await self._views.worker_states(timeout)

    def in_flight(self) -> int:
        """Calls dispatched through this pool that have not ended."""
        return self._views.in_flight()

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``/metrics`` and ``/status`` once open, or None without ``metrics_port``."""
        return None if self._observer is None else self._observer.address

    def __repr__(self) -> str:
        return f"<WorkerPool {self._layers.path.state} [{self.stats().summary()}]>"


public(WorkerPool)


def attach_feed(pool: WorkerPool, feed: Feed) -> Feed:
    """Attach a standalone `pool.Executor`'s waiting line to open ``pool`` (`PoolExecutors.attach`): its one door
    into the pool it runs (users have ``executor()``; the Executor reads none of the pool's private state)."""
    return pool._executors.attach(feed)


def finishing(pool: WorkerPool) -> None:
    """A standalone `pool.Executor` was shut down with calls still to run (`PoolExecutors.finishing`)."""
    pool._executors.finishing()
