"""Paused queues as one dispatching process sees them: reread when told, and what to give back.

    pause/resume (any process) ──> the store ──"pause" notice / the tick──> stale ──> reread ──> names
    names ──> the scheduler skips waiting jobs of those queues and gives them back to the store

The store's lease never returns a paused queue's jobs; what this adds is
the jobs a process had already leased when the pause came: they go back
to the store instead of starting.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._attempt import Attempt
from ._store import JobStore, PausableStore


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
