"""What `WorkerPool` says about itself: ``stats()``, ``workers``, ``pids``, ``worker_states()``, ``in_flight()``.

Kept apart so the pool's own module keeps to wiring the layers and its
lifecycle (as `_jobs` and `_executors` are).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .._observe._stats import PoolStats, WorkerSignals
from .._transport._proto import leakypool_pb2 as pb
from .._transport._rpc import WorkerMetadata

if TYPE_CHECKING:
    from .._dispatch._admission import Admission
    from .._dispatch._membership import Membership
    from .._dispatch._path import CallPath
    from .._dispatch._roster import Roster
    from .._fleet._local_fleet import LocalFleet


class PoolViews:
    """`WorkerPool`'s introspection (a mixin: the pool sets the attributes below)."""

    _path: CallPath
    _roster: Roster
    _fleet: LocalFleet
    _admission: Admission
    _membership: Membership
    _growth: Any
    _observer: Any

    def stats(self) -> PoolStats:
        """Load now: calls running and waiting, overall and per queue, key and workflow."""
        limits = self._path.limits.stats()
        return PoolStats(
            workers=len(self._roster),
            local_workers=len(self._fleet),
            admitted=self._admission.admitted,
            running=self.in_flight(),
            waiting_for_worker=self._admission.waiting,
            waiting_for_limits=sum(s.waiting for s in limits.values()),
            dispatched=self._admission.placement.dispatched,
            rejected=self._admission.rejected,
            capacity_timeouts=self._path.capacity_timeouts,
            grown=self._growth.grown,
            provision_failures=self._growth.failures,
            limits=limits,
            shrunk=self._fleet.shrunk,
            recycled=dict(self._fleet.recycled),
            worker_signals={
                c.metadata.uid: WorkerSignals(r.in_flight, r.capacity, r.memory_fraction, r.loop_lag_seconds)
                for c in self._roster.connections()
                if (r := c.last_room) is not None
            },
        )

    @property
    def workers(self) -> Mapping[uuid.UUID, WorkerMetadata]:
        """The pool's workers now, by uid (a snapshot)."""
        return {uid: entry[0] for uid, entry in self._roster.workers.items()}

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        """``(host, port)`` of ``/metrics`` and ``/status`` once open, or None without ``metrics_port``."""
        return None if self._observer is None else self._observer.address

    @property
    def pids(self) -> list[int]:
        """Pids of the worker processes this pool spawned and still runs."""
        return self._fleet.pids

    async def worker_states(self, timeout: float = 5.0) -> dict[uuid.UUID, pb.WorkerState]:
        """Each worker's own report (State RPC): in flight, idle seconds, capacity...

        Workers that do not answer within ``timeout`` are left out.
        """
        return await self._membership.states(timeout)

    def in_flight(self) -> int:
        """Calls dispatched through this pool that have not ended."""
        return self._path.in_flight
