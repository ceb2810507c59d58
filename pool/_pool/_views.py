"""What `WorkerPool` says about itself: ``stats()``, ``debug()``, ``workers``, ``pids``, ``worker_states()``, ``in_flight()``.

An object the pool owns (as it owns `_jobs.PoolJobs` and `_executors.PoolExecutors`), so the pool's own
module keeps to its public methods and its lifecycle.
"""

from __future__ import annotations

import collections
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .._observe import PoolDebug, PoolStats, WorkerSignals
from .._transport import WorkerMetadata
from .._transport import leakypool_pb2 as pb

if TYPE_CHECKING:
    from ._layers import Layers


class PoolViews:
    """What a `WorkerPool` shows of itself, read from its layers (the pool's methods of the same names)."""

    def __init__(self, layers: Layers) -> None:
        self._layers = layers

    def stats(self) -> PoolStats:
        """Load now: calls running and waiting, overall and per queue, key and workflow."""
        layers = self._layers
        limits = layers.path.limits.stats()
        return PoolStats(
            workers=len(layers.roster),
            local_workers=len(layers.fleet),
            admitted=layers.path.admitted,
            running=self.in_flight(),
            waiting_for_worker=layers.path.waiting,
            waiting_for_limits=sum(s.waiting for s in limits.values()),
            dispatched=layers.path.dispatched,
            rejected=layers.path.rejected,
            capacity_timeouts=layers.path.capacity_timeouts,
            grown=layers.growth.grown,
            provision_failures=layers.growth.failures,
            limits=limits,
            shrunk=layers.fleet.shrunk,
            recycled=dict(layers.fleet.recycled),
            builds=dict(collections.Counter(entry[0].build for entry in layers.roster.workers.values())),
            worker_signals={
                c.metadata.uid: WorkerSignals(r.in_flight, r.capacity, r.memory_fraction, r.loop_lag_seconds)
                for c in layers.roster.connections()
                if (r := c.last_room) is not None
            },
        )

    def debug(self) -> PoolDebug:
        """What the pool holds inside now: marks, crash counts, the template, the paused queues."""
        layers = self._layers
        fleet, scheduler = layers.fleet, layers.scheduler
        template = fleet.template
        return PoolDebug(
            known_full=frozenset(layers.roster.known_full),
            crashes=fleet.crashes,
            crash_streak=fleet.crash_streak,
            replacements_owed=fleet.owed,
            growing=fleet.growing,
            init_error=fleet.init_error,
            template_pid=None if template is None else template.pid,
            template_alive=template is not None and template.alive,
            template_forked=template is not None and template.forked,
            template_exit_status=fleet.template_exit_status,
            paused_queues=frozenset() if scheduler is None else scheduler.paused.names,
            paused_queues_stale=scheduler is not None and scheduler.paused.stale,
        )

    @property
    def workers(self) -> Mapping[uuid.UUID, WorkerMetadata]:
        """The pool's workers now, by uid (a snapshot)."""
        return {uid: entry[0] for uid, entry in self._layers.roster.workers.items()}

    @property
    def pids(self) -> list[int]:
        """Pids of the worker processes this pool spawned and still runs."""
        return self._layers.fleet.pids

    async def worker_states(self, timeout: float = 5.0) -> dict[uuid.UUID, pb.WorkerState]:
        """Each worker's own report (State RPC): in flight, idle seconds, capacity...

        Workers that do not answer within ``timeout`` are left out.
        """
        return await self._layers.membership.states(timeout)

    def in_flight(self) -> int:
        """Calls dispatched through this pool that have not ended."""
        return self._layers.path.in_flight
