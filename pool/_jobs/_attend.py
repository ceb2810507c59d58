"""One leased job seen through by the scheduler: placed on a worker, marked running, its outcome recorded.

    waiting ──placement──> Accept ──> running (`Recorder.follow`) ──> outcome in the store
                  │
                  ├─ no worker has room ──> back to waiting (it blocks placements until capacity frees)
                  │      a job with a shared limit, or no worker at all ──> given back to the store
                  ├─ its limit is full ──> back to waiting until a slot frees
                  └─ cannot start ──> failed in the store, with the reason

`Scheduler` decides when to place (its loop and batch); this is what one
placement does, and what each way out of it leaves in the batch.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from .._errors import NoWorkersAvailable, PoolClosed
from ._attempt import Attempt, due_order, persist
from ._store import JobRecord

if TYPE_CHECKING:
    from .._base._tasks import TaskOwner
    from .._call._task import Task
    from .._transport._outgoing import OutgoingCall
    from ._due import NextDue
    from ._job import Jobs
    from ._placements import PlacementWindow
    from ._recorder import Recorder
    from ._stores._retry import RetryingStore


class Attending:
    """`Scheduler`'s placements, each from its worker's Accept to its outcome (mixed in; uses its batch)."""

    if TYPE_CHECKING:  # the scheduler's, set in its __init__ (see there)
        store: RetryingStore
        owner: str
        jobs: Jobs
        _place: Callable[[Task], Awaitable[OutgoingCall | None]]
        _starved: Callable[[], None]
        _has_workers: Callable[[], bool]
        _tasks: TaskOwner
        _wake: asyncio.Event
        _waiting: list[Attempt]
        _placing: set[Attempt]
        _running: dict[str, Attempt]
        _cancelled: set[str]
        _held: set[str]
        _window: PlacementWindow
        _recorder: Recorder
        _next_due: NextDue
        _gave_back: bool
        _backlog: bool

        def _drop(self, job_id: str) -> None: ...
        def wake(self) -> None: ...

    async def _attend(self, attempt: Attempt) -> None:
        """Place the job, mark it running (the worker accepted it), wait for its outcome, record it."""
        job = attempt.job
        epoch = self._window.epoch
        try:
            call = await self._place(attempt.task)
        except NoWorkersAvailable:
            await self._no_worker(attempt, epoch)
            return
        except PoolClosed:
            self._put_back(attempt)
            return
        except asyncio.CancelledError:
            if not attempt.cancel_requested:
                raise
            self._drop(job.id)
            return
        except Exception as exc:  # noqa: BLE001 - a job that cannot start fails with the reason recorded in the store
            await self._fail_pending(job, exc)
            return
        finally:
            self._placing.discard(attempt)
        if call is None:
            attempt.blocked_at = epoch  # a limit was full: wait for a slot to free (unless one freed since)
            self._put_back(attempt)
            self._wake.set()  # its placement slot is free: the jobs behind it may go
            return
        self._cancelled.discard(job.id)
        self._running[job.id] = attempt
        if self._window.accepted():
            self._wake.set()  # room for more placements
        final: JobRecord | None = None
        try:
            final = await self._recorder.follow(attempt, call)
        finally:
            self._running.pop(job.id, None)
            self._held.discard(job.id)
            self.jobs.notify_finished(job.id, final)
            if final is None:  # back in the store (a retry, due later) or someone else's now
                self._backlog = True
                self._next_due.forget()
            if job.queue or job.workflow:
                self.wake()  # a shared limit slot is free now: lease what it lets through (from the store too)

    async def _no_worker(self, attempt: Attempt, epoch: int) -> None:
        """No worker took ``attempt`` (placed in capacity ``epoch``): wait here for capacity, or give it back."""
        job = attempt.job
        if job.queue or job.workflow or not self._has_workers():
            # Do not sit on a shared limit slot, nor on any job while this process has no worker:
            # give back, so a process with room takes it (the deadline is checked at each lease).
            given = [job.id] if self._has_workers() else [job.id, *(a.job.id for a in self._waiting)]
            if len(given) > 1:
                self._waiting = []
            await persist("giving jobs back", lambda: self.store.unlease(self.owner, given))
            for job_id in given:
                self._drop(job_id)
            self._gave_back = True
            self._backlog = True  # they are in the store again
            self._window.shrink()
            self._starved()
            return
        if self._window.refused(epoch):
            self._wake.set()  # capacity freed while this placement was refused: try again now
        self._starved()
        self._put_back(attempt)

    def _put_back(self, attempt: Attempt) -> None:
        """``attempt`` waits here again, in due order (unless it was cancelled meanwhile)."""
        attempt.runner = None
        if attempt.job.id in self._cancelled:
            self._cancelled.discard(attempt.job.id)
            self._drop(attempt.job.id)
            return
        bisect.insort(self._waiting, attempt, key=due_order)

    async def _fail_pending(self, job: JobRecord, error: BaseException) -> None:
        """Record that ``job`` failed before it ran (``error`` says why); this process holds it no more."""
        await self._recorder.fail_pending(job, error)
        self._held.discard(job.id)
        self.jobs.notify_finished(job.id, None)
