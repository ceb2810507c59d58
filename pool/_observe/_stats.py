"""`PoolStats` and `GateStats`: snapshots of a pool's load, for `WorkerPool.stats`; `PoolDebug`: of its insides."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping

from .._base import public


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """A snapshot of a pool's load, from `WorkerPool.stats`.

    Attributes:
        workers: Workers in the pool now (local ones included).
        local_workers: Worker processes this pool runs.
        admitted: Calls admitted and not ended (running + waiting).
        running: Calls a worker accepted and is running.
        waiting_for_worker: Calls queued (or waiting for a queue place) for a worker.
        waiting_for_limits: Calls waiting for a queue, key or workflow slot.
        dispatched: Calls a worker accepted since the pool opened.
        rejected: Calls refused by admission (ceiling or full queue).
        capacity_timeouts: Calls that waited past the dispatch deadline.
        grown: Workers started under load (they idle out again).
        shrunk: Workers grown under load that left after idling.
        provision_failures: Requests the pool's provisioner raised for (docs/capacity.md).
        recycled: Spawned workers that exited on purpose and were replaced, by
            reason: ``tasks`` and ``memory`` (recycling), ``timeout`` (killed at a hard timeout).
        limits: Running and waiting calls per live queue, key and workflow.
        builds: Workers per build they run ("": unversioned; see ``build`` in docs/concepts.md).
        worker_signals: Per worker that has told this pool it has room again
            (it had turned a call away): its load and resource signals then.
            `WorkerPool.worker_states` asks every worker now instead.
    """

    workers: int
    local_workers: int
    admitted: int
    running: int
    waiting_for_worker: int
    waiting_for_limits: int
    dispatched: int
    rejected: int
    capacity_timeouts: int
    grown: int
    limits: Mapping[str, GateStats]
    shrunk: int = 0
    provision_failures: int = 0
    recycled: Mapping[str, int] = dataclasses.field(default_factory=dict)
    builds: Mapping[str, int] = dataclasses.field(default_factory=dict)
    worker_signals: Mapping[uuid.UUID, WorkerSignals] = dataclasses.field(default_factory=dict)

    def summary(self) -> str:
        """One line for a ``repr``: workers, calls, and each live limit."""
        text = (
            f"Workers: {self.workers} ({self.local_workers} local) | Calls: {self.running} running, "
            f"{self.waiting_for_worker + self.waiting_for_limits} waiting, {self.dispatched} dispatched"
        )
        if self.rejected or self.capacity_timeouts:
            text += f", {self.rejected} rejected, {self.capacity_timeouts} timed out"
        limits = ", ".join(f"{name}: {g.running} running, {g.waiting} waiting" for name, g in self.limits.items())
        return text + (f" | {limits}" if limits else "")


@dataclasses.dataclass(frozen=True)
class WorkerSignals:
    """A worker's load and resource signals as its last "room" frame reported them."""

    in_flight: int
    capacity: int
    memory_fraction: float
    loop_lag_s: float


@dataclasses.dataclass(frozen=True, slots=True)
class GateStats:
    """Running and waiting calls of one limit, for `WorkerPool.stats`."""

    running: int
    waiting: int


@dataclasses.dataclass(frozen=True)
class PoolDebug:
    """A snapshot of what a pool holds inside, from `WorkerPool.debug`: for diagnosis and tests, not for load.

    Each field names the state its owner keeps (docs/architecture.md says
    which object owns what); reading it here takes nothing from that owner
    and changes nothing. Fields may be added; none is removed without a
    note in the changelog.

    Attributes:
        known_full: Workers the balancers' context marks full now (they turned a call away and have not
            reported room since).
        crashes: Spawned workers that died unasked since the pool opened (each replaced after a back-off).
        crash_streak: Of those, the deaths in a row the back-off counts now (0 once a replacement lived
            long enough).
        replacements_owed: Replacements of dead workers not started yet (waiting out the back-off).
        growing: A worker is being started under load now.
        init_error: Why the last spawned worker's initializer failed, if it did (None once one starts).
        template_pid: The pid of the template spawned workers are forked from (None: no template).
        template_alive: The template still runs (a lost one is not replaced: workers start fresh).
        template_forked: The template is a fork of this process (else a fresh interpreter).
        template_exit_status: Once the pool closed: 0 if its template left when told, -9 if it had to be killed.
        paused_queues: The job queues paused, as this process last read them from its store.
        paused_queues_stale: The store's pauses may have changed since (read again before the next lease).
    """

    known_full: frozenset[uuid.UUID]
    crashes: int
    crash_streak: int
    replacements_owed: int
    growing: bool
    init_error: BaseException | None
    template_pid: int | None
    template_alive: bool
    template_forked: bool
    template_exit_status: int | None
    paused_queues: frozenset[str]
    paused_queues_stale: bool


public(GateStats, PoolDebug, PoolStats)
