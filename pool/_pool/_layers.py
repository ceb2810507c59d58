"""The layers one `WorkerPool` wires together, built from its settings, and what ties them at run time.

    LocalFleet (_fleet) ──on READY──> Membership (_dispatch) ──> Roster: what balancers see
    discovery (_discovery) ──events──┘
    routine call ──> CallPath (_dispatch): admission, limits, the line, placement ──> a worker's stream (_transport)
    Scheduler (_jobs): the store's jobs, placed through the same CallPath

The pool's own module keeps to its public methods and its lifecycle; the
objects it owns for jobs, executors and views each get this object and read
the layers they need from it (none re-declares another's state).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from backpressure import BackpressureLike
from balancer import LoadBalancerLike, RoundRobinLoadBalancer

from .._base import TaskOwner
from .._call import CallRecord, WorkerConnection
from .._config import PoolConfig, default_secret_file
from .._dispatch import CallPath, Membership, NestedHost
from .._fleet import Provisioner, pool_capacity
from .._transport import OutgoingCall, Seal, SecretSource, TlsCredentials, Trust, spawn_key

if TYPE_CHECKING:
    from .._jobs import JobStore, Scheduler

_log = logging.getLogger("leakypool.pool")


class Layers:
    """Membership and roster, the fleet and its growth, the call path, the scheduler.

    Args:
        config: The pool's settings.
        discovery_url: Where discovered workers register (a worker the pool grows registers there too).
        credentials, backpressure, loadbalancer, provisioner, initializer, store: as `WorkerPool` takes them.
        tags: Admit only workers that carry all these.
        automatic: Workers to spawn when ``spawn`` is not set.
    """

    def __init__(
        self,
        config: PoolConfig,
        *,
        discovery_url: str,
        tags: frozenset[str],
        credentials: TlsCredentials | None,
        backpressure: BackpressureLike | None,
        loadbalancer: LoadBalancerLike | None,
        provisioner: Provisioner | None,
        initializer: tuple[Callable[..., Any], tuple[Any, ...]] | None,
        store: str | JobStore | None,
        automatic: int,
    ) -> None:
        self.config = config
        self.tasks = TaskOwner("pool", _log)  # every background task of the pool: cancelled and awaited on exit
        self.secret_source = secret_source = SecretSource(
            config.secret, config.secret_file, default_path=default_secret_file()
        )
        own_key = spawn_key()  # the workers this pool spawns prove themselves with it, and it to them
        self.membership = Membership(
            NestedHost(self, self.tasks),
            credentials=credentials,
            trust=Trust.of(own_key, source=secret_source, peer_uids=config.peer_uids),
            insecure=config.insecure,
            spawn=lambda coro, name: self.tasks.spawn(coro, name=name),
            tags=tags,
            changed=self.capacity_changed,
            close=self.close_connections,
            is_local=lambda uid: uid in self.fleet,
            broken_local=lambda uid: self.fleet.replace(uid),
            joined=self._joined,
        )
        self.roster = self.membership.roster
        self.fleet, self.growth = pool_capacity(
            config,
            backpressure,
            provisioner,
            minimum=config.spawn if config.spawn is not None else automatic,
            provision_timeout=config.provision_timeout,
            tags=tags,
            members=lambda: self.roster.workers.keys(),
            registry=discovery_url,
            on_ready=self.membership.admit,
            on_exit=lambda uid, why: self.close_connections(self.membership.evict(uid, why)),
            initializer=initializer,
            secret=secret_source,
            spawn_key=own_key,
        )
        self.fleet.changed = self.capacity_changed
        self.path = CallPath(
            loadbalancer if loadbalancer is not None else RoundRobinLoadBalancer(),
            self.membership,
            self.close_connections,
            queue_depth=config.queue_depth,
            admission_timeout=config.admission_timeout,
            max_pending=config.max_pending,
            default_deadline=config.dispatch_deadline,
            plain_prefetch=config.plain_prefetch,
            freed=self._freed if store is not None or config.store else None,
            starved=self.growth.grow,
            coming=self.fleet.coming,
            stranded=self._stranded,
            overdue=self._overdue,
            build=config.build,
        )
        self.scheduler: Scheduler | None = job_scheduler(
            store,
            config,
            self.path,
            self.growth.grow,
            lambda: len(self.roster) > 0 or self.growth.maximum > 0,
            seal=Seal(lambda: secret_source.secrets(create=True), secret_source.describe()),
        )

    async def start(self) -> None:
        """Start the fleet and the scheduler (`WorkerPool.__aenter__`; on failure, `stop` undoes what started)."""
        await self.fleet.prepare()  # first: the template forks only while no thread (a store's) runs
        if self.scheduler is not None:
            await self.scheduler.store.open()  # a bad store fails here, before any worker starts
        await self.fleet.start()
        if self.scheduler is not None:
            await self.scheduler.start()

    async def stop(self) -> None:
        """Stop the workers spawned (reaping them even if cancelled), the scheduler and every task; close connections."""
        async with contextlib.AsyncExitStack() as stack:  # each step runs even if one before it fails
            stack.push_async_callback(self.tasks.aclose)
            stack.push_async_callback(self.membership.close)
            if self.scheduler is not None:
                self.scheduler.stop_leasing()
                stack.push_async_callback(self.scheduler.store.close)
                stack.push_async_callback(self.scheduler.aclose)
            stack.push_async_callback(self.growth.aclose)
            await self.fleet.stop()  # workers drain: running jobs record their outcomes meanwhile

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """A workers' nested call, through the same path as the pool's own (`NestedHost`)."""
        return await self.path.dispatch(task, parent)

    def capacity_changed(self) -> None:
        """A worker joined, left, or has room again: growth, waiting calls and due jobs hear of it."""
        self.growth.changed()
        self.path.capacity_changed()
        if self.scheduler is not None:
            self.scheduler.capacity_changed()

    def _freed(self) -> None:
        """A call or a job attempt ended (the call path has already told its own line): due jobs hear of it."""
        if self.scheduler is not None:
            self.scheduler.capacity_changed()

    def _joined(self, uid: object) -> None:
        """A worker joined: calls waiting in other workers' lines may move to it."""
        self.path.feed_idle()

    def _stranded(self) -> BaseException | None:
        """Why no worker can come (every waiting call ends with it), or None."""
        return None if len(self.roster) else self.fleet.stranded()

    def _overdue(self, uid: Any) -> None:
        """A worker past a plain call's hard timeout: its fleet retires it (killed and replaced)."""
        self.fleet.retire(uid, "timeout")

    def close_connections(self, connections: Iterable[WorkerConnection]) -> None:
        """Close connections to workers that left, as the pool's tasks (on exit `Membership.close` does it)."""
        for connection in connections:
            if self.tasks.closed:
                continue
            self.tasks.spawn(connection.close(), name=f"close {connection.metadata.uid}")


def job_scheduler(
    store: str | JobStore | None,
    config: PoolConfig,
    path: CallPath,
    grow: Callable[[], Any],
    can_run: Callable[[], bool],
    *,
    seal: Seal,
) -> Scheduler | None:
    """The scheduler of a pool with a store (``store=`` object, or the ``store`` setting), else None.

    Args:
        store: ``WorkerPool(store=...)``: a `pool.JobStore` object, a URL, or None.
        config: The pool's settings (``config.store`` is the URL, argument or ``LEAKYPOOL_STORE``).
        path: Where job attempts are placed.
        grow: Asks for one more worker when a job finds none with room.
        can_run: Whether the pool has, or may start, any worker at all.
        seal: Seals what the store keeps with the user's secret, and checks it before anything is loaded.
    """
    given = store if store is not None and not isinstance(store, str) else config.store
    if not given:
        return None
    from .._jobs import Scheduler, open_store  # sqlite3 and the rest load only for a pool with a store

    job_store = open_store(given)
    assert job_store is not None  # noqa: S101 - an invariant, stated for the type checker
    return Scheduler(
        job_store,
        path.place_job,
        grow,
        can_run,
        lease_ttl=config.lease_ttl,
        default_deadline=config.dispatch_deadline,
        max_pending=config.max_pending,
        keep_finished=config.keep_finished,
        store_retry=config.store_retry,
        seal=seal,
        build=config.build,
    )
