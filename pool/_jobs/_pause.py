"""Paused queues as one dispatching process sees them: reread when told, and what to give back.

    pause/resume (any process) ──> the store ──"pause" notice / the tick──> stale ──> reread ──> names
    names ──> the scheduler skips waiting jobs of those queues and gives them back to the store

The store's lease never returns a paused queue's jobs; what this adds is
the jobs a process had already leased when the pause came: they go back
to the store instead of starting.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._attempt import Attempt, persist
from ._store import JobStore, PausableStore

_log = logging.getLogger("leakypool.jobs")


class PausedQueues:
    """The paused queues' names as last read from ``store`` (none for a store that cannot pause).

    Args:
        store: The job store.
        wake: Lease and dispatch now (called when the pauses may have changed).
    """

    def __init__(self, store: JobStore, *, wake: Callable[[], None]) -> None:
        self.store = store
        self._wake = wake
        self.names: frozenset[str] = frozenset()
        self.stale = isinstance(getattr(store, "inner", store), PausableStore)

    def changed(self) -> None:
        """A queue may have been paused or resumed: reread before the next lease."""
        self.stale = isinstance(getattr(self.store, "inner", self.store), PausableStore)
        self._wake()

    async def refresh(self, waiting: Sequence[Attempt]) -> list[Attempt]:
        """Reread the names if stale; the waiting attempts of paused queues (to give back)."""
        if self.stale:
            self.stale = False
            try:
                self.names = frozenset(await self.store.paused())  # type: ignore[attr-defined]
            except BaseException:
                self.stale = True
                raise
        return [attempt for attempt in waiting if attempt.job.queue in self.names] if self.names else []


class LeaseUpkeep:
    """What `Scheduler` does before each lease (mixed in; uses its batch, its store and its owner id)."""

    async def _upkeep(self) -> None:
        """Give back the leased jobs of paused queues, and reconcile the store with what this process holds.

        Reconciling (`_strays`) runs on every lease tick and after a lease
        in doubt (one that failed with a lost connection may have committed:
        its jobs are this process's in the store but not in memory). It waits
        until no submission this process keeps is on its way in (`_claim`
        takes none meanwhile), so every job the store has it hold is in
        ``_held`` or is a stray.
        """
        scheduler: Any = self
        if held := await scheduler.paused.refresh(scheduler._waiting):  # leased before their queue was paused
            scheduler._waiting = [a for a in scheduler._waiting if a not in held]
            ids = [a.job.id for a in held]
            await persist("giving back paused jobs", lambda: scheduler.store.unlease(scheduler.owner, ids))
            for job_id in ids:
                scheduler._drop(job_id)
        if scheduler.reconcile_due and not scheduler._claimed:
            pending, running = await scheduler.store.reconcile(scheduler.owner, list(scheduler._held), time.time())
            scheduler._reconcile_wanted = False
            if pending:
                _log.warning("gave back %d pending job(s) held here in the store only: %s", len(pending), pending)
            for job_id in running:
                _log.warning("job %s: the store had it running here, where no attempt runs it: pending again", job_id)
            if pending or running:
                scheduler._backlog = True  # in the store again: lease them (this process hears no notice of its own)
