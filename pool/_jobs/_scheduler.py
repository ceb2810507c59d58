"""The scheduler: the store's pending jobs, dispatched through the pool like calls.

    submit ──> store (pending) ──lease (oldest due first, a bounded batch)──> waiting here
                                                                                 │ limits free?
                                                                                 │ CallPath.place_job
        no worker has room: stay pending, retry on the next capacity event <──── │
        past dispatch_deadline: failed (CapacityTimeout)                         v
                                                   Accept ──> store: running (attempt + 1)
                                                                                 │ outcome
              succeeded | failed | (retry: pending again, after a back-off) <────┘

Only a bounded batch of pending jobs (`LEASE_BATCH`) is ever held in
memory; the rest stay in the store, so a backlog of 100,000 costs no more
than one of 100. The process holds an owner lease it renews every
``lease_ttl / 3``; on start-up and on every tick it re-queues the jobs of
owners whose lease expired (their dispatching process died): those jobs
run again, at least once in all, and their attempt count says so. A job
held here starts only while this process's own lease surely holds (`_lease`).

This module leases and decides when to place; one placement's course, from
the worker's Accept (or its refusal) to the outcome, is the `Attendant`'s (`_attend`); what it
holds meanwhile, the `Holdings` both share (`_holdings`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from .._base import TaskOwner
from .._call import CallRecord
from .._errors import SerializationError, StoreError
from .._transport import OutgoingCall, Seal
from ._attempt import Attempt as _Attempt
from ._attempt import Outage, expired, persist
from ._attend import Attendant
from ._codec import RetryPolicy, decode
from ._due import NextDue
from ._holdings import Holdings
from ._job import Jobs
from ._lease import OwnLease
from ._pause import PausedQueues
from ._periodic import Schedules
from ._placements import PlacementWindow
from ._presence import Presence
from ._recorder import Recorder
from ._retention import Retention
from ._store import JobRecord, JobStore
from ._stores._retry import retrying_store

_log = logging.getLogger("leakypool.jobs")

SEAL_SAMPLE: Final[int] = 32
"""Pending jobs whose seals are checked at start, to name a secret that differs from other processes' at once."""

LEASE_BATCH: Final[int] = 256
"""Pending jobs one process holds in memory at most, waiting for a worker."""


class Scheduler:
    """Runs the jobs of one store from one dispatching process.

    Args:
        store: The job store.
        place: Dispatches a task once through the pool's limits and balancer:
            the accepted call, None if a limit is full, or NoWorkersAvailable.
        starved: Called when a job found no worker (grow the pool).
        has_workers: Whether the pool has (or can start) a worker at all.
        lease_ttl: Seconds this process's owner lease lasts without renewal.
        default_deadline: Dispatch deadline of jobs without their own.
        max_pending: Active jobs the store may hold (the submit ceiling).
        keep_finished: Seconds finished jobs are kept before they are purged (0: forever).
        seal: Seals what this process writes to the store and checks what it loads (the user's secret).
        build: This process's build: what its jobs are pinned to (see `Jobs`).
    """

    def __init__(
        self,
        store: JobStore,
        place: Callable[[CallRecord], Awaitable[OutgoingCall | None]],
        starved: Callable[[], None],
        has_workers: Callable[[], bool] = lambda: True,
        *,
        lease_ttl: float,
        default_deadline: float,
        max_pending: int | None,
        keep_finished: float = 0.0,
        store_retry: float = 10.0,
        seal: Seal,
        build: str = "",
    ) -> None:
        # Every store call rides over a restart (issue #25); once the store is back, rescan it (issue 40).
        self.store = store = retrying_store(store, store_retry, recovered=self.wake)
        self.owner = uuid.uuid4().hex
        self._has_workers = has_workers
        self._ttl = lease_ttl
        self._tasks = TaskOwner("job scheduler", _log)
        self._wake = asyncio.Event()
        self._sleep: asyncio.Timeout | None = None  # while the loop sleeps: its timeout (`due_by` brings it earlier)
        self._window = PlacementWindow()  # how many placements at once; whether to wait for capacity
        self._lease = OwnLease(lease_ttl)  # when a held job may start; kept submissions on their way in
        self._reconcile_wanted = False  # a lease tick passed: check the store holds nothing else for this owner
        self._leased_at = 0.0  # when the last lease looked (Unix seconds): jobs due later, it has not seen
        self._next_due = NextDue()  # the earliest future due time (a delayed, retried or rate-held job): sleep until
        self._closing = False
        self._started = False
        self.seal = seal
        recorder = Recorder(store, self.owner, seal)
        self.retention = Retention(store, keep_finished)
        self.paused = PausedQueues(store, wake=self._wake.set)  # the paused queues, as this process last read them
        self._presence = Presence(
            store,
            self.owner,
            lease_ttl,
            wake=self.wake,
            cancel=self.cancel_running,
            pauses_changed=self.pauses_changed,
            ticked=self.reconcile,
            lease=self._lease,
        )
        self.jobs = Jobs(store, self, seal, max_pending=max_pending, default_deadline=default_deadline, build=build)
        self.schedules = Schedules(self.jobs, self.wake)  # WorkerPool.schedule: periodic jobs
        self._held = Holdings(self.jobs.notify_finished)  # what this process holds (its Attendant's too)
        self._attendant = Attendant(
            self._held,
            store,
            recorder,
            self._window,
            self._next_due,
            place=place,
            starved=starved,
            has_workers=has_workers,
            room=self._wake,
            wake=self.wake,
            may_start=lambda attempt: self._lease.may_start(attempt.lease_epoch, time.time()),
            due_by=self.due_by,
            start_by=self._lease.start_by,
        )

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Take the owner lease, re-queue dead owners' jobs, say so if the store holds others' seals, start leasing."""
        await self._presence.start()
        await self._check_seals()
        self._started = True
        self._tasks.spawn(self._run(), name="schedule")
        if self.retention.enabled:  # every process: the store lets one purge at a time
            self._tasks.spawn(self.retention.run(), name="retention")

    async def _check_seals(self) -> None:
        """Say loudly, at start, that pending jobs in the store carry no seal of this process's secret.

        They fail without running when leased (`_adopt`): either somebody
        without the secret wrote them, or another process on the store holds
        another secret (a misconfiguration, named here at once rather than
        found job by job), or an older release wrote them.
        """
        try:
            records = await self.store.list("pending", SEAL_SAMPLE)
        except StoreError:
            return  # (the store is checked again at every lease)
        foreign = [r.id for r in records if not self.seal.verifies(f"job {r.id}", "payload", r.payload)]
        if foreign:
            _log.error(
                "%d of the %d oldest pending jobs in %r carry no seal of this process's secret (%s), "
                "so they will fail without running (first: %s). Processes that share a store must share a secret: "
                "give each the same secret file (secret_file= or LEAKYPOOL_SECRET_FILE; docs/stores.md). "
                "Jobs an older release wrote: `leakypool jobs STORE_URL sign`.",
                len(foreign),
                len(records),
                self.store,
                self.seal.where,
                foreign[0],
            )

    def stop_leasing(self) -> None:
        """Lease no more jobs (the pool is closing); running ones finish."""
        self._closing = True
        self._wake.set()

    async def aclose(self) -> None:
        """Stop, and hand every job this process still holds back to the store."""
        self._closing = True
        await self.schedules.aclose()
        await self._presence.aclose()
        await self._tasks.aclose()
        for job_id in list(self._held.ids):  # their waiters here read the store from now on
            self._held.drop(job_id)
        if not self._started:
            return
        try:
            await self.store.release_owner(self.owner, time.time())
        except Exception:  # noqa: BLE001 - best effort at close: the lease expiring hands the jobs back anyway
            _log.exception("could not hand this process's jobs back to the store; they return when its lease expires")

    def wake(self) -> None:
        """Lease and dispatch now (something may be due in the store: a submit, a notice, jobs given back)."""
        self._held.backlog = True
        self._next_due.forget()
        self._wake.set()

    def due_at(self, when: float) -> None:
        """A job in the store is due at ``when`` (Unix seconds): lease it then (now, if it is due)."""
        if when <= time.time():
            self.wake()
        elif self._next_due.learn(when):
            self._wake.set()  # sleep until then, not until the tick

    def reconcile(self) -> None:
        """Check, before the next lease, that the store has this process hold only what it holds (each tick)."""
        self._reconcile_wanted = True
        self.wake()

    @property
    def reconcile_due(self) -> bool:
        """Whether the store and this process's holdings are to be reconciled before the next lease."""
        return self._reconcile_wanted or self.store.lease_in_doubt

    def claim(self) -> str:
        """This process's owner id if it can take one more job into its batch now, else "" (`JobHolder`)."""
        if not self._has_workers() or self.reconcile_due:  # (none on its way in while reconciling: _upkeep)
            return ""  # a submitter without workers leaves its jobs to the processes that have some
        if self._started and not self._closing and len(self._held.waiting) + self._lease.in_flight < LEASE_BATCH:
            self._lease.claim()
            return self.owner
        return ""

    def adopt(self, job: JobRecord | None, run: tuple[CallRecord, RetryPolicy] | None = None) -> None:
        """A job this process just submitted, inserted already leased by it (None: it was not; `JobHolder`)."""
        epoch = self._lease.arrived()
        if job is not None:
            self._adopt(job, epoch, run)
            self._wake.set()

    def holds(self, job_id: str) -> bool:
        """Whether this process holds ``job_id`` (leased or running): its end is reported (`JobHolder`)."""
        return job_id in self._held.ids

    def pauses_changed(self) -> None:
        """A queue may have been paused or resumed: reread before the next lease (`JobHolder`)."""
        self.paused.changed()

    @property
    def purged(self) -> int:
        """Finished jobs this process purged so far (`JobHolder`)."""
        return self.retention.purged

    def capacity_changed(self) -> None:
        """A worker or a limit slot may have freed: try the waiting jobs again (if any wait)."""
        self._window.capacity_changed()
        if self._held.waiting or self._held.gave_back or self._held.backlog:  # else calls ending cost nothing here
            self._held.gave_back = False
            self._wake.set()

    def cancel_running(self, job_id: str) -> None:
        """Drop a cancelled job this process holds: waiting, forget it; placed or running, cancel it."""
        before = len(self._held.waiting)
        self._held.waiting[:] = [a for a in self._held.waiting if a.job.id != job_id]
        if len(self._held.waiting) < before:
            self._held.drop(job_id)
        attempt = self._held.running.get(job_id)
        if attempt is None:
            attempt = next((a for a in self._held.placing if a.job.id == job_id), None)
            if attempt is not None:
                self._held.cancelled.add(job_id)  # a placement may still put it back: it must not
        if attempt is not None and attempt.runner is not None:
            attempt.cancel_requested = True
            attempt.runner.cancel()

    @property
    def waiting(self) -> int:
        """Leased jobs waiting here for a worker or a limit."""
        return len(self._held.waiting)

    @property
    def running(self) -> int:
        """Jobs of this process a worker runs now."""
        return len(self._held.running)

    # -- the loop --------------------------------------------------------------------

    async def _run(self) -> None:
        outage = Outage("leasing jobs")
        while not self._closing:
            self._wake.clear()
            try:
                again = await self._fill()
                timeout = 0.0 if again else await self._next_wait()
            except StoreError as exc:
                outage.failed(exc)
                await asyncio.sleep(outage.delay())  # the store is back soon, or this keeps trying
                continue
            if outage.over():
                self.wake()  # rescan before sleeping: a notice may have been lost while the store was away
            if self._closing or not timeout:
                continue
            self._sleep = sleep = asyncio.timeout(timeout)
            try:
                async with sleep:
                    await self._wake.wait()
            except TimeoutError:
                # The backstop: a worker's verdict may change with no event we
                # see (a hook on memory or time), so probe again now and then;
                # and something may have come due (a retry, a delayed job) or
                # arrived unannounced (SQLite has no notices): lease.
                self._window.probe()
                self._held.backlog = True
                self._next_due.forget()
            finally:
                self._sleep = None

    def due_by(self, deadline: float) -> None:
        """A held job waits for a worker until ``deadline`` (Unix seconds): the loop, if asleep, wakes by then.

        An attempt no worker took goes back among the waiting while the loop
        sleeps; without this it slept on to its tick (a third of the lease) and
        the job failed seconds past its deadline.
        """
        sleep = self._sleep
        if sleep is None:
            return  # the loop runs: it reads the waiting jobs' deadlines before it sleeps (`_next_wait`)
        when = asyncio.get_running_loop().time() + max(0.0, deadline - time.time())
        current = sleep.when()
        if current is None or when < current:
            sleep.reschedule(when)

    async def _next_wait(self) -> float:
        """Seconds until something is due without any event: a deadline, a retry, the tick (0: lease now).

        A full batch waits for room (its event leases) rather than for a due time."""
        now = time.time()
        wait = self._ttl / 3
        deadline = self._first_deadline()
        if len(self._held.waiting) < LEASE_BATCH:
            due_in = await self._next_due.seconds(self.store, now, self._leased_at)
            if due_in <= 0:
                self._held.backlog = True  # due since the last lease looked (its timer fired a little early)
                return 0.0
            wait = min(wait, due_in)
            deadline = min(deadline, self._first_deadline())  # an attempt may have come back while the store answered
        return max(0.0, min(wait, deadline - now))

    def _first_deadline(self) -> float:
        """The earliest dispatch deadline of the jobs waiting here (Unix seconds; inf: none waits)."""
        return min((a.job.deadline for a in self._held.waiting), default=math.inf)

    async def _fill(self) -> bool:
        """Lease due jobs into the batch and dispatch what fits; True to lease again at once (more may be due)."""
        await self._upkeep()  # paused queues' jobs, and those of a lease in doubt, back to the store
        room = LEASE_BATCH - len(self._held.waiting)
        leased: list[JobRecord] = []
        if room > 0 and not self._closing and self._held.backlog:
            # Only when the store may hold something: a job this process submitted
            # and kept starts without a lease's round trip in front of it.
            self._held.backlog = False  # from here on, anything new in the store comes with a wake
            now, epoch = time.time(), self._lease.epoch
            try:
                leased = await self.store.lease(self.owner, room, now)
            except BaseException:
                self._held.backlog = True  # the store is away: lease again once it is back
                raise
            self._leased_at = now  # what came due by then, this lease has seen
            self._next_due.forget()  # the lease may have set due times (jobs a rate holds back)
            for job in leased:
                self._adopt(job, epoch)
            if len(leased) == room:
                self._held.backlog = True  # a full lease: more may be due
        elif room <= 0:
            self._held.backlog = True  # no room to lease: what the store holds waits for room here
        await self._dispatch_waiting()
        # Lease again at once if the store may hold more and placements just made room in the batch.
        return (
            self._held.backlog and len(self._held.waiting) < LEASE_BATCH and self._has_workers() and not self._closing
        )

    async def _upkeep(self) -> None:
        """Give back the leased jobs of paused queues, and reconcile the store with what this process holds.

        Reconciling (`_stores._strays`) runs on every lease tick and after a
        lease in doubt (one that failed with a lost connection may have
        committed: its jobs are this process's in the store but not in
        memory). It waits until no submission this process keeps is on its
        way in (`claim` takes none meanwhile), so every job the store has
        it hold is in `Holdings.ids` or is a stray. First, waiting jobs from before a lapse go back (`_lease`).
        """
        held = self._held
        if paused := await self.paused.refresh(held.waiting):  # leased before their queue was paused
            await self._give_back(paused, "giving back paused jobs")
        if stale := [a for a in held.waiting if a.lease_epoch != self._lease.epoch]:
            await self._give_back(stale, "giving back jobs held through a lapsed lease")
            held.backlog = True  # those still pending (and this process's) are the store's to lease again
        if self.reconcile_due and not self._lease.in_flight:
            pending, running = await self.store.reconcile(self.owner, list(held.ids), time.time())
            self._reconcile_wanted = False
            if pending:
                _log.warning("gave back %d pending job(s) held here in the store only: %s", len(pending), pending)
            for job_id in running:
                _log.warning("job %s: the store had it running here, where no attempt runs it: pending again", job_id)
            if pending or running:
                held.backlog = True  # in the store again: lease them (this process hears no notice of its own)

    async def _give_back(self, attempts: list[_Attempt], what: str) -> None:
        """Hand waiting ``attempts`` back to the store unstarted (fenced by owner: not one another took)."""
        gone = set(attempts)
        self._held.waiting[:] = [a for a in self._held.waiting if a not in gone]
        ids = [a.job.id for a in attempts]
        await persist(what, lambda: self.store.unlease(self.owner, ids))
        for job_id in ids:
            self._held.drop(job_id)

    def _adopt(self, job: JobRecord, epoch: int, run: tuple[CallRecord, RetryPolicy] | None = None) -> None:
        if job.id in self._held.ids:
            return  # given back by another while its lease lapsed, leased here again: the attempt held stays one
        if run is not None:
            task, policy = run  # submitted here: its payload says what this process just wrote
        else:
            try:
                task, policy = decode(job.id, job.payload, self.seal)
            except SerializationError as exc:
                self._tasks.spawn(self._attendant.fail_pending(job, exc), name=f"fail {job.id}")
                return
        attempt = _Attempt(job, task, policy)
        attempt.lease_epoch = epoch  # it starts only in that epoch of the owner lease (`_lease`)
        self._held.adopt(attempt)

    def _expire(self) -> None:
        """Fail the waiting jobs whose dispatch deadline passed (they never ran)."""
        self._held.waiting[:], gone = expired(self._held.waiting, time.time())
        for attempt, error in gone:
            self._tasks.spawn(self._attendant.fail_pending(attempt.job, error), name=f"fail {attempt.job.id}")

    async def _dispatch_waiting(self) -> None:
        """Start a placement for each waiting job, in order, while workers may have room.

        Placements run concurrently (each awaits one worker's Accept), as
        calls do; a job that finds no worker blocks further placements until
        the next capacity event, one whose limit is full waits for one too.
        How many run at once is the `PlacementWindow`'s (a slow start).
        None starts unless the owner lease lets it (`_lease`; the next renewal wakes the loop).
        """
        self._expire()
        if not self._lease.holds(time.time()):
            return
        for attempt in list(self._held.waiting):
            if self._closing or not self._window.allows(len(self._held.placing)):
                return
            if attempt.lease_epoch != self._lease.epoch:
                self._wake.set()  # came in before a lapse: `_upkeep` gives it back first
                continue
            if attempt.blocked_at == self._window.epoch or attempt.job.queue in self.paused.names:
                continue  # its limit was full, and nothing freed since; or its queue is paused
            self._held.waiting.remove(attempt)
            self._held.placing.add(attempt)
            attempt.runner = self._tasks.spawn(self._attendant.attend(attempt), name=f"job {attempt.job.id}")

    def __repr__(self) -> str:
        return f"<Scheduler {self.store!r} owner={self.owner} [{self.waiting} waiting, {self.running} running]>"
