"""The scheduler: the store's pending jobs, dispatched through the pool like calls.

    submit ──> store (pending) ──lease (oldest due first, a bounded batch)──> waiting here
                                                                                 │ limits free?
                                                                                 │ Placement (balancer)
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
run again, at least once in all, and their attempt count says so.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

from .. import _wire
from .._calls import CANCEL_CONFIRM_S, Task, outcome_result
from .._errors import CapacityTimeout, NoWorkersAvailable, PoolClosed, SerializationError, WorkerBroken
from .._proto import leakypool_pb2 as pb
from .._session import OutgoingCall
from .._tasks import TaskOwner
from ._codec import RetryPolicy, decode
from ._job import Jobs
from ._store import JobRecord, JobStore

_log = logging.getLogger("leakypool.jobs")

LEASE_BATCH: Final[int] = 256
"""Pending jobs one process holds in memory at most, waiting for a worker."""

RESULT_LIMIT_BYTES: Final[int] = 16 * 1024 * 1024
"""A job whose pickled result is larger fails (the store keeps results, not blobs of any size)."""

MAX_BACKOFF_S: Final[float] = 300.0
"""Retry back-off grows exponentially up to this."""

_random = random.Random()


class _Attempt:
    __slots__ = ("job", "task", "policy", "runner", "cancel_requested")

    def __init__(self, job: JobRecord, task: Task, policy: RetryPolicy) -> None:
        self.job = job
        self.task = task
        self.policy = policy
        self.runner: asyncio.Task[None] | None = None
        self.cancel_requested = False


class Scheduler:
    """Runs the jobs of one store from one dispatching process.

    Args:
        store: The job store.
        place: Dispatches a task once through the pool's limits and balancer:
            the accepted call, None if a limit is full, or NoWorkersAvailable.
        starved: Called when a job found no worker (grow the pool).
        lease_ttl: Seconds this process's owner lease lasts without renewal.
        default_deadline: Dispatch deadline of jobs without their own.
        max_pending: Active jobs the store may hold (the submit ceiling).
    """

    def __init__(
        self,
        store: JobStore,
        place: Callable[[Task], Awaitable[OutgoingCall | None]],
        starved: Callable[[], None],
        *,
        lease_ttl: float,
        default_deadline: float,
        max_pending: int | None,
    ) -> None:
        self.store = store
        self.owner = uuid.uuid4().hex
        self._place = place
        self._starved = starved
        self._ttl = lease_ttl
        self._tasks = TaskOwner("job scheduler", _log)
        self._wake = asyncio.Event()
        self._waiting: list[_Attempt] = []
        self._running: dict[str, _Attempt] = {}
        self._closing = False
        self._started = False
        self.jobs = Jobs(
            store,
            wake=self.wake,
            cancel_running=self.cancel_running,
            max_pending=max_pending,
            default_deadline=default_deadline,
        )

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Take the owner lease, re-queue dead owners' jobs, start leasing."""
        now = time.time()
        await self.store.heartbeat(self.owner, now, self._ttl)
        self._started = True
        revived = await self.store.recover(now)
        if revived:
            _log.warning("re-queued %d job(s) whose dispatching process died", len(revived))
        self._tasks.spawn(self._run(), name="schedule")
        self._tasks.spawn(self._keep_lease(), name="owner lease")

    def stop_leasing(self) -> None:
        """Lease no more jobs (the pool is closing); running ones finish."""
        self._closing = True
        self._wake.set()

    async def aclose(self) -> None:
        """Stop, and hand every job this process still holds back to the store."""
        self._closing = True
        await self._tasks.aclose()
        if not self._started:
            return
        try:
            await self.store.release_owner(self.owner, time.time())
        except Exception:
            _log.exception("could not hand this process's jobs back to the store; they return when its lease expires")

    def wake(self) -> None:
        """Capacity may have freed, or a job was submitted: try to dispatch now."""
        self._wake.set()

    def cancel_running(self, job_id: str) -> None:
        """Drop a cancelled job this process holds: unplaced, forget it; running, cancel it on its worker."""
        self._waiting = [a for a in self._waiting if a.job.id != job_id]
        attempt = self._running.get(job_id)
        if attempt is not None and attempt.runner is not None:
            attempt.cancel_requested = True
            attempt.runner.cancel()

    @property
    def waiting(self) -> int:
        """Leased jobs waiting here for a worker or a limit."""
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Jobs of this process a worker runs now."""
        return len(self._running)

    # -- the loop --------------------------------------------------------------------

    async def _keep_lease(self) -> None:
        while True:
            await asyncio.sleep(self._ttl / 3)
            now = time.time()
            await self.store.heartbeat(self.owner, now, self._ttl)
            if await self.store.recover(now):
                self.wake()
            for job_id in await self.store.cancel_requested(self.owner):
                self.cancel_running(job_id)

    async def _run(self) -> None:
        while not self._closing:
            self._wake.clear()
            leased_all = await self._fill()
            if leased_all and not self._closing:
                continue  # a full batch: there may be more due
            timeout = await self._next_wait()
            try:
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _next_wait(self) -> float:
        """Seconds until something is due without any event: a deadline, a retry, the backstop tick."""
        now = time.time()
        wait = self._ttl / 3
        if self._waiting:
            wait = min(wait, min(a.job.deadline for a in self._waiting) - now)
        else:
            due = await self.store.oldest_due(now)
            if due is not None:
                wait = min(wait, due - now)
        return max(0.0, wait)

    async def _fill(self) -> bool:
        """Lease due jobs into the batch and dispatch what fits; True if the lease filled the batch."""
        room = LEASE_BATCH - len(self._waiting)
        leased: list[JobRecord] = []
        if room > 0 and not self._closing:
            leased = await self.store.lease(self.owner, room, time.time())
            for job in leased:
                self._adopt(job)
        await self._dispatch_waiting()
        return room > 0 and len(leased) == room

    def _adopt(self, job: JobRecord) -> None:
        try:
            task, policy = decode(job.payload)
        except SerializationError as exc:
            self._tasks.spawn(self._fail_pending(job, exc), name=f"fail {job.id}")
            return
        self._waiting.append(_Attempt(job, task, policy))

    def _expire(self) -> None:
        """Fail the waiting jobs whose dispatch deadline passed (they never ran)."""
        now, keep = time.time(), []
        for attempt in self._waiting:
            if attempt.job.deadline > now:
                keep.append(attempt)
                continue
            waited = attempt.job.deadline - attempt.job.created_at
            error = CapacityTimeout(f"{attempt.task.name}() found no worker within {waited:g}s (dispatch_deadline)")
            self._tasks.spawn(self._fail_pending(attempt.job, error), name=f"fail {attempt.job.id}")
        self._waiting = keep

    async def _dispatch_waiting(self) -> None:
        self._expire()
        index = 0
        while index < len(self._waiting) and not self._closing:
            attempt = self._waiting[index]
            try:
                call = await self._place(attempt.task)
            except NoWorkersAvailable:
                self._starved()
                return  # no worker has room: wait for a capacity event
            except PoolClosed:
                return
            except Exception as exc:
                del self._waiting[index]
                self._tasks.spawn(self._fail_pending(attempt.job, exc), name=f"fail {attempt.job.id}")
                continue
            if call is None:
                index += 1  # a limit is full: later jobs may still fit
                continue
            del self._waiting[index]
            self._running[attempt.job.id] = attempt
            attempt.runner = self._tasks.spawn(self._attend(attempt, call), name=f"job {attempt.job.id}")

    # -- one attempt -----------------------------------------------------------------

    async def _attend(self, attempt: _Attempt, call: OutgoingCall) -> None:
        """Mark the job running (the worker accepted it), wait for its outcome, record it."""
        job = attempt.job
        try:
            if not await self.store.mark_running(job.id, self.owner, time.time()):
                call.cancel()  # cancelled (or taken) meanwhile
                return
            try:
                frame = await call.receive()
                outcome = frame.outcome
            except WorkerBroken as exc:
                outcome = _raised(exc, job.routine)
            except asyncio.CancelledError:
                await call.abort(CANCEL_CONFIRM_S)
                if not attempt.cancel_requested:
                    raise  # the pool is closing: release_owner re-queues it
                await self._finish(job, "cancelled", None, "cancelled by request")
                return
            await self._record(attempt, outcome)
        finally:
            self._running.pop(job.id, None)
            self.jobs.notify_finished(job.id)

    async def _record(self, attempt: _Attempt, outcome: pb.Outcome) -> None:
        job = attempt.job
        if outcome.kind == pb.Outcome.RETURN and len(outcome.value) > RESULT_LIMIT_BYTES:
            error = SerializationError(
                f"the result of {job.routine}() is {len(outcome.value):,} bytes, over the "
                f"{RESULT_LIMIT_BYTES:,}-byte limit of a stored job result"
            )
            outcome = _raised(error, job.routine)
        if outcome.kind == pb.Outcome.RETURN:
            await self._finish(job, "succeeded", outcome, "")
            return
        ok, error = outcome_result(outcome, job.routine)
        retriable = isinstance(error, WorkerBroken) or isinstance(error, attempt.policy.retry_on)
        attempts = job.attempts + 1
        if retriable and attempts < job.max_attempts:
            delay = min(MAX_BACKOFF_S, attempt.policy.retry_backoff * 2 ** (attempts - 1))
            delay *= 0.5 + _random.random()  # jitter: retries of a burst do not land together
            await self.store.retry(job.id, self.owner, time.time() + delay, _describe(error))
            _log.info("job %s: attempt %d failed (%s); retrying in %.2fs", job.id, attempts, _describe(error), delay)
            return
        await self._finish(job, "failed", outcome, _describe(error))

    async def _finish(self, job: JobRecord, state: str, outcome: pb.Outcome | None, error: str) -> None:
        data = None if outcome is None else outcome.SerializeToString()
        if not await self.store.finish(job.id, self.owner, state, time.time(), outcome=data, error=error):
            _log.warning("job %s: its outcome (%s) was not recorded: the job is no longer ours", job.id, state)

    async def _fail_pending(self, job: JobRecord, error: BaseException) -> None:
        outcome = _raised(error, job.routine)
        await self.store.fail_pending(job.id, self.owner, time.time(), _describe(error), outcome.SerializeToString())
        self.jobs.notify_finished(job.id)

    def __repr__(self) -> str:
        return f"<Scheduler {self.store!r} owner={self.owner} [{self.waiting} waiting, {self.running} running]>"


def _raised(error: BaseException, name: str) -> pb.Outcome:
    value, tb = _wire.pack_exception(error, name)
    return pb.Outcome(kind=pb.Outcome.RAISE, value=value, traceback=tb)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
