"""A dispatching process's presence on the store: its owner lease, and what it hears from the others.

    every ttl/3:  heartbeat (renew the lease; its timing tells `OwnLease` until when held jobs may start)
                  ─> recover dead owners' jobs ─> poll cancel requests
                  ─> `ticked` (the scheduler reconciles what the store has it hold with what it runs)
    on notice:    "due"            -> lease now (another process submitted, gave back, freed a slot)
                  "pause"          -> reread the paused queues now (also every ttl/3)
                  "cancel <me>"    -> poll cancel requests now

The tick is the backstop; a store with notices (PostgreSQL's LISTEN/NOTIFY)
makes other processes' submissions and cancels visible at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from .._base import TaskOwner
from .._errors import StoreError
from ._attempt import Outage
from ._lease import OwnLease
from ._store import JobStore, WatchableStore

_log = logging.getLogger("leakypool.jobs")


class Presence:
    """Keeps ``owner``'s lease on ``store`` alive and turns others' notices into wake-ups.

    Args:
        store: The job store.
        owner: This process's owner id.
        ttl: Seconds the lease lasts without renewal (renewed every ttl/3).
        wake: Lease and dispatch now.
        cancel: Cancel a running job this process holds.
        pauses_changed: Reread the paused queues.
        ticked: Called at each renewal (every ttl/3).
        lease: The lease as this process knows it (each renewal's timing goes there).
    """

    def __init__(
        self,
        store: JobStore,
        owner: str,
        ttl: float,
        *,
        wake: Callable[[], None],
        cancel: Callable[[str], None],
        pauses_changed: Callable[[], None] = lambda: None,
        ticked: Callable[[], None] = lambda: None,
        lease: OwnLease | None = None,
    ) -> None:
        self.store = store
        self.owner = owner
        self._ttl = ttl
        self.lease = OwnLease(ttl) if lease is None else lease
        self._wake = wake
        self._cancel = cancel
        self._pauses_changed = pauses_changed  # reread paused queues (each tick, and on a "pause" notice)
        self._ticked = ticked  # each renewal
        self._tasks = TaskOwner("job presence", _log)
        self._poll_cancels = asyncio.Event()
        self._deaf = Outage("listening for other processes")

    async def start(self) -> None:
        """Take the lease and re-queue dead owners' jobs; keep doing both from now on."""
        await self._renew()
        self._tasks.spawn(self._keep(), name="owner lease")
        # The store itself, not its RetryingStore: the wrapper forwards `watch` by __getattr__, which isinstance
        # against a runtime protocol no longer sees from Python 3.12 on (it looks attributes up statically).
        watchable = getattr(self.store, "inner", self.store)
        if isinstance(watchable, WatchableStore):
            self._tasks.spawn(self._listen(watchable), name="store notices")

    async def aclose(self) -> None:
        await self._tasks.aclose()

    async def _keep(self) -> None:
        outage = Outage("renewing the owner lease")
        clock = asyncio.get_running_loop().time
        renew_at = clock() + self._ttl / 3
        while True:
            try:
                async with asyncio.timeout_at(renew_at):
                    await self._poll_cancels.wait()  # a notice: poll cancels now, renew on schedule
            except TimeoutError:
                pass
            self._poll_cancels.clear()
            sent = clock()
            renew = sent >= renew_at
            try:
                if renew:
                    await self._renew()
                    self._wake()  # also jobs a dead owner only held (pending) are free now
                    self._pauses_changed()
                    self._ticked()
                for job_id in await self.store.cancel_requested(self.owner):
                    self._cancel(job_id)
            except StoreError as exc:
                outage.failed(exc)
                renew_at = clock() + outage.delay()
            else:
                if outage.over():
                    self._wake()  # the store was away: what came due meanwhile may have sent no notice
                if renew:  # a period after it was sent, however long its answer took (`OwnLease.holds`)
                    renew_at = sent + self._ttl / 3

    async def _renew(self) -> None:
        """Renew the lease (noting when it was answered: `OwnLease`), then re-queue dead owners' jobs."""
        now = time.time()
        await self.store.heartbeat(self.owner, now, self._ttl)
        if self.lease.renewed(now, time.time()):
            _log.warning(
                "this process's owner lease may have run out before it was renewed: the jobs it held and had "
                "not started go back to the store (another process may have run them meanwhile)"
            )
        _revived(await self.store.recover(now))

    async def _listen(self, store: WatchableStore) -> None:
        while True:
            try:
                await store.watch(self._heard)
            except StoreError as exc:
                self._deaf.failed(exc)
                await asyncio.sleep(self._deaf.delay())

    def _heard(self, kind: str, argument: str) -> None:
        self._deaf.over()  # listening again (watch says "due" once it is)
        if kind == "due":
            self._wake()
        elif kind == "cancel" and argument == self.owner:
            self._poll_cancels.set()
        elif kind == "pause":
            self._pauses_changed()


def _revived(ids: list[str]) -> None:
    if ids:
        _log.warning("re-queued %d running job(s) whose dispatching process died", len(ids))
