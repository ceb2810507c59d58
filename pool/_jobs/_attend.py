"""One leased job seen through by the scheduler: placed on a worker, marked running, its outcome recorded.

    waiting ──placement──> Accept ──> running (`Recorder.follow`) ──> outcome in the store
                  │
                  ├─ no worker has room ──> back to waiting (it blocks placements until capacity frees)
                  │      a job with a shared limit, or no worker at all ──> given back to the store
                  ├─ its limit is full ──> back to waiting until a slot frees
                  ├─ it reached its worker after its start-by time ──> given back to the store, unstarted
                  └─ cannot start ──> failed in the store, with the reason

`Scheduler` decides when to place (its loop and batch); an `Attendant` is what
one placement does, and what each way out of it leaves in the `Holdings`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .._call import StartByPassed
from .._errors import NoWorkersAvailable, PoolClosed, VersionMismatch
from ._attempt import Attempt, persist
from ._holdings import Holdings
from ._store import JobRecord

_log = logging.getLogger("leakypool.jobs")

if TYPE_CHECKING:
    from .._call import CallRecord
    from .._transport import OutgoingCall
    from ._due import NextDue
    from ._placements import PlacementWindow
    from ._recorder import Recorder
    from ._stores._retry import RetryingStore


class Attendant:
    """Sees a scheduler's placements through, each from its worker's Accept to its outcome.

    Args:
        held: The jobs the scheduler holds (shared with it).
        store: The job store (retrying).
        recorder: Writes what an accepted attempt leaves in the store.
        window: How many placements run at once (shared with the scheduler).
        next_due: The scheduler's next due time (an attempt back in the store may change it).
        place: Dispatches a task once through the pool's limits and balancer.
        starved: Called when a job found no worker (grow the pool).
        has_workers: Whether the pool has (or can start) a worker at all.
        room: Set when placements may go on (the scheduler's loop waits on it).
        wake: Lease and dispatch now (the store may hold jobs a freed slot lets through).
        may_start: Whether the owner lease lets an attempt start now (`_lease`), asked again just
            before it is offered: the loop's turn may have come late.
        start_by: The latest time an attempt placed now may start (Unix seconds), which its worker checks.
        due_by: Told the deadline of an attempt put back to wait for a worker (the loop wakes by then).
    """

    def __init__(
        self,
        held: Holdings,
        store: RetryingStore,
        recorder: Recorder,
        window: PlacementWindow,
        next_due: NextDue,
        *,
        place: Callable[[CallRecord], Awaitable[OutgoingCall | None]],
        starved: Callable[[], None],
        has_workers: Callable[[], bool],
        room: asyncio.Event,
        wake: Callable[[], None],
        may_start: Callable[[Attempt], bool] = lambda attempt: True,
        start_by: Callable[[], float] = lambda: 0.0,
        due_by: Callable[[float], None] = lambda deadline: None,
    ) -> None:
        self._held = held
        self._store = store
        self._recorder = recorder
        self._window = window
        self._next_due = next_due
        self._place = place
        self._starved = starved
        self._has_workers = has_workers
        self._room = room
        self._wake = wake
        self._may_start = may_start
        self._start_by = start_by
        self._due_by = due_by

    async def attend(self, attempt: Attempt) -> None:
        """Place the job, mark it running (the worker accepted it), wait for its outcome, record it."""
        held, job = self._held, attempt.job
        epoch = self._window.epoch
        if not self._may_start(attempt):
            held.placing.discard(attempt)
            held.put_back(attempt)  # the loop gives it back (a lapse) or places it after the next renewal
            self._room.set()
            return
        attempt.task.start_by = self._start_by()
        try:
            call = await self._place(attempt.task)
        except NoWorkersAvailable as exc:
            # No worker of its version (a rolling deploy's may come): it waits as for room, and names it at its end.
            attempt.mismatch = exc if isinstance(exc, VersionMismatch) else None
            await self._no_worker(attempt, epoch)
            return
        except PoolClosed:
            held.put_back(attempt)
            return
        except StartByPassed as exc:
            await self._late(attempt, exc)
            return
        except asyncio.CancelledError:
            if not attempt.cancel_requested:
                raise
            held.drop(job.id)
            return
        except Exception as exc:  # noqa: BLE001 - a job that cannot start fails with the reason recorded in the store
            await self.fail_pending(job, exc)
            return
        finally:
            held.placing.discard(attempt)
        if call is None:
            attempt.blocked_at = epoch  # a limit was full: wait for a slot to free (unless one freed since)
            held.put_back(attempt)
            self._room.set()  # its placement slot is free: the jobs behind it may go
            return
        held.cancelled.discard(job.id)
        held.running[job.id] = attempt
        if self._window.accepted():
            self._room.set()  # room for more placements
        final: JobRecord | None = None
        try:
            final = await self._recorder.follow(attempt, call)
        finally:
            held.end(job.id, final)
            if final is None:  # back in the store (a retry, due later) or someone else's now
                held.backlog = True
                self._next_due.forget()
            if final is None or job.queue or job.workflow:
                # The lease loop reads the next due time again (a retry's, often in milliseconds) instead of
                # sleeping on to its tick, a third of the lease away; a shared limit slot is free now: lease
                # what it lets through (from the store too).
                self._wake()

    async def _no_worker(self, attempt: Attempt, epoch: int) -> None:
        """No worker took ``attempt`` (placed in capacity ``epoch``): wait here for capacity, or give it back."""
        held, job = self._held, attempt.job
        if job.queue or job.workflow or not self._has_workers():
            # Do not sit on a shared limit slot, nor on any job while this process has no worker:
            # give back, so a process with room takes it (the deadline is checked at each lease).
            given, deadline = [job.id], job.deadline
            if not self._has_workers():
                given.extend(a.job.id for a in held.waiting)
                deadline = min([deadline, *(a.job.deadline for a in held.waiting)])
                held.waiting.clear()
            await persist("giving jobs back", lambda: self._store.unlease(self._recorder.owner, given))
            for job_id in given:
                held.drop(job_id)
            self._due_by(deadline)  # the lease that fails it past its deadline comes then, not at the tick
            held.gave_back = True
            held.backlog = True  # they are in the store again
            self._window.shrink()
            self._starved()
            return
        if self._window.refused(epoch):
            self._room.set()  # capacity freed while this placement was refused: try again now
        self._starved()
        held.put_back(attempt)
        self._due_by(job.deadline)

    async def _late(self, attempt: Attempt, exc: StartByPassed) -> None:
        """``attempt`` reached its worker after its start-by time and did not start: its job goes back to the store
        (this process's lease may have lapsed; whoever leases it next runs it once)."""
        job = attempt.job
        _log.warning(
            "job %s (%s()) was not started: %s; given back to the store (a stalled process or network, or clocks "
            "that disagree by more than lease_ttl/3)",
            job.id,
            job.routine,
            exc,
        )
        await persist("giving a late job back", lambda: self._store.unlease(self._recorder.owner, [job.id]))
        self._held.drop(job.id)
        self._held.backlog = True  # it is in the store again
        self._room.set()

    async def fail_pending(self, job: JobRecord, error: BaseException) -> None:
        """Record that ``job`` failed before it ran (``error`` says why); this process holds it no more."""
        await self._recorder.fail_pending(job, error)
        self._held.end(job.id, None)
