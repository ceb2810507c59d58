"""Retention: finished jobs older than ``keep_finished`` are deleted, a bounded batch at a time.

    every PURGE_EVERY_S (jittered):  purge(finished before now - keep_finished, PURGE_BATCH)
                                     a full batch: pause PURGE_PAUSE_S, purge the next one ...

Every process runs this; the store lets one purge at a time (PostgreSQL:
the others skip their turn; SQLite: batches take the file's write lock in
turn, each for one bounded batch, so leases and submits slip in between).
Only final jobs (succeeded, failed, cancelled) are ever deleted; pending
and running ones, delayed ones included, are not looked at.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Final

from .._base import RANDOM
from .._errors import StoreError
from ._attempt import Outage
from ._store import JobStore, MaintainedStore

_log = logging.getLogger("leakypool.jobs")

PURGE_BATCH: Final[int] = 1000
"""Jobs one purge statement deletes at most (the lock it holds lasts that long)."""

PURGE_EVERY_S: Final[float] = 60.0
"""How often a process looks for finished jobs past ``keep_finished`` (jittered by up to a half)."""

PURGE_PAUSE_S: Final[float] = 0.05
"""Pause between two full batches: other processes' leases and writes go first."""


def purge_wait(first: bool, rng: random.Random) -> float:
    """Seconds before the next purge: soon after start-up, then every `PURGE_EVERY_S`, jittered so processes spread."""
    return PURGE_EVERY_S * (rng.uniform(0.05, 0.2) if first else rng.uniform(0.75, 1.25))


class Retention:
    """Purges ``store``'s finished jobs older than ``keep_finished`` seconds (0: keeps them forever).

    Attributes:
        purged: Jobs this process deleted so far (the ``leakypool_jobs_purged_total`` metric).
    """

    def __init__(self, store: JobStore, keep_finished: float) -> None:
        self.store = store
        self.keep_finished = keep_finished
        self.purged = 0

    @property
    def enabled(self) -> bool:
        """Whether there is anything to do: a retention period, and a store that can purge."""
        return self.keep_finished > 0 and isinstance(self.store, MaintainedStore)

    async def run(self) -> None:
        """Purge now and then until cancelled; a store outage is logged once and waited out."""
        outage, first = Outage("purging finished jobs"), True
        while True:
            await asyncio.sleep(purge_wait(first, RANDOM))
            first = False
            try:
                await self.purge_once(time.time())
            except StoreError as exc:
                outage.failed(exc)
                continue
            outage.over()

    async def purge_once(self, now: float) -> int:
        """Delete every finished job that ended over ``keep_finished`` before ``now``, batch by batch; how many."""
        assert isinstance(self.store, MaintainedStore)  # noqa: S101 - an invariant, stated for the type checker
        total = 0
        while True:
            n = await self.store.purge(now - self.keep_finished, PURGE_BATCH)
            total += n
            self.purged += n
            if n < PURGE_BATCH:
                break
            await asyncio.sleep(PURGE_PAUSE_S)
        if total:
            _log.info("purged %d finished job(s) older than keep_finished=%gs", total, self.keep_finished)
        return total
