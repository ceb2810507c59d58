"""`pool.Job`, a durable call as the caller sees it, and `Jobs`, the pool's book of them.

A `Job` is a snapshot of one row of the store plus the verbs that act on
it (`result`, `cancel`, `refresh`); any process that opens the same store
can look a job up by id (``await pool.jobs.get(id)``) and wait for it.
"""

from __future__ import annotations

import asyncio
import builtins
import datetime
import itertools
import time
import uuid
from typing import Any, Final, Protocol

from .._base import public
from .._call import CallRecord, outcome_result
from .._errors import ConfigError
from .._transport import Seal
from .._transport import leakypool_pb2 as pb
from ._codec import RetryPolicy, open_outcome, payload_fields, pinned_build, seal_fields, task_of
from ._store import ACTIVE_STATES, TERMINAL_STATES, JobRecord, JobStore, NewJob, PausableStore

POLL_MIN_S: Final[float] = 0.05
"""First interval at which `Job.result` rereads a job another process runs."""

POLL_MAX_S: Final[float] = 0.5
"""Longest interval between two rereads (the wait doubles up to it)."""


class JobOptions(Protocol):
    """What a submission reads of its routine's options (`pool.Routine.options` carries them)."""

    # Read-only (properties): `pool.Routine`'s options are a frozen dataclass, and a submission only reads them.
    @property
    def job_id(self) -> str: ...
    @property
    def retries(self) -> int: ...
    @property
    def retry_backoff(self) -> float: ...
    @property
    def retry_on(self) -> tuple[type[BaseException], ...]: ...
    @property
    def dispatch_deadline(self) -> float | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def delay(self) -> float: ...
    @property
    def run_at(self) -> datetime.datetime | None: ...
    @property
    def connection(self) -> Any: ...
    @property
    def pinned(self) -> bool: ...


def queue_name(queue: str | Any) -> str:
    """The name of ``queue`` (a name or a `pool.Queue`).

    Raises:
        ConfigError: empty, or not a name.
    """
    name = getattr(queue, "name", queue)
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"queue: expected a queue name (a non-empty string or a pool.Queue), got {queue!r}")
    return name


def _when(timestamp: float | None) -> datetime.datetime | None:
    return None if timestamp is None else datetime.datetime.fromtimestamp(timestamp, datetime.UTC)


class Job:
    """A call written to the job store: it survives a crash or restart of the process that submitted it.

    A snapshot: ``state`` and the other fields are as of the submission or
    the last `refresh`. States go ``pending`` -> ``running`` (the moment a
    worker accepts it) -> ``succeeded`` | ``failed`` | ``cancelled``.

    Attributes:
        id: The job id (the idempotency key given as ``job_id``, or a generated one).
        routine: The routine's qualified name.
    """

    __slots__ = ("_jobs", "_record")

    def __init__(self, jobs: Jobs, record: JobRecord) -> None:
        self._jobs = jobs
        self._record = record

    @property
    def id(self) -> str:
        return self._record.id

    @property
    def routine(self) -> str:
        return self._record.routine

    @property
    def state(self) -> str:
        """``pending``, ``running``, ``succeeded``, ``failed`` or ``cancelled``."""
        return self._record.state

    @property
    def attempts(self) -> int:
        """Attempts started so far (more than one: it ran again after a failure or a crash)."""
        return self._record.attempts

    @property
    def error(self) -> str:
        """Why it failed or was cancelled, as text ("" otherwise)."""
        return self._record.error

    @property
    def run_at(self) -> datetime.datetime:
        """When it is (or was) due: its submission, ``delay`` later, its ``run_at``, or a retry's back-off."""
        return _when(self._record.next_at)  # type: ignore[return-value]

    @property
    def priority(self) -> int:
        """Higher runs first among due jobs (default 0)."""
        return self._record.priority

    @property
    def created_at(self) -> datetime.datetime:
        return _when(self._record.created_at)  # type: ignore[return-value]

    @property
    def started_at(self) -> datetime.datetime | None:
        """When its last attempt was accepted by a worker."""
        return _when(self._record.started_at)

    @property
    def finished_at(self) -> datetime.datetime | None:
        return _when(self._record.finished_at)

    @property
    def build(self) -> str:
        """The build it runs on: the one it was submitted from, when pinned ("": unpinned, or submitted from an
        unversioned process; it then runs the build of whichever process dispatches it).

        Raises:
            SerializationError: its payload is not sealed under a secret held here.
        """
        return pinned_build(self._record.id, self._record.payload, self._jobs.seal)

    @property
    def done(self) -> bool:
        """Whether it reached a final state (as of this snapshot)."""
        return self._record.state in TERMINAL_STATES

    async def refresh(self) -> Job:
        """Reread this job from the store; returns self."""
        record = await self._jobs.store.get(self.id)
        if record is not None:
            self._record = record
        return self

    async def result(self, timeout: float | None = None) -> Any:
        """Wait until the job is final; return its value or raise its error.

        A failed job re-raises the routine's own exception (its type, with
        the worker's traceback as ``__cause__``), or the error of ours that
        ended it (`CapacityTimeout`, `WorkerBroken`, `SerializationError`).
        The stored outcome is loaded only if its seal checks (it was written
        by a holder of the secret, for this job).

        Raises:
            SerializationError: the stored outcome's seal does not check (nothing of it is loaded).
            TimeoutError: it is not final within ``timeout`` seconds.
            asyncio.CancelledError: it was cancelled (or cancelling the waiter).
        """
        self._record = await self._jobs.wait(self.id, timeout)
        record = self._record
        if record.state == "cancelled":
            raise asyncio.CancelledError(f"job {record.id} was cancelled: {record.error}")
        stored = record.outcome
        outcome = pb.Outcome.FromString(open_outcome(record.id, stored, self._jobs.seal) if stored else b"")
        ok, value = outcome_result(outcome, record.routine)
        if not ok:
            raise value
        return value

    async def cancel(self) -> Job:
        """Cancel it: a pending job never runs; a running one is cancelled on its worker. Returns self."""
        record = await self._jobs.cancel(self.id)
        if record is not None:
            self._record = record
        return self

    def __repr__(self) -> str:
        r = self._record
        return f"<Job {r.id} {r.routine}() {r.state}, {r.attempts} attempt(s)>"


class JobHolder(Protocol):
    """What a pool's job book asks of the scheduler that runs this process's share of the store's jobs."""

    def claim(self) -> str:
        """This process's owner id if it can take one more job it submits into its batch now, else ""."""
        ...

    def adopt(self, job: JobRecord | None, run: tuple[CallRecord, RetryPolicy] | None = None) -> None:
        """A job this process just submitted, inserted already leased by it (None: it was not); ``run``: what its
        payload holds (the submitter made it: no need to read it back)."""
        ...

    def holds(self, job_id: str) -> bool:
        """Whether this process holds the job (leased or running): then it reports the job's end."""
        ...

    def due_at(self, when: float) -> None:
        """A job in the store is due at ``when`` (Unix seconds): lease it then."""
        ...

    def cancel_running(self, job_id: str) -> None:
        """Cancel the job now if this process holds it (waiting: forget it; running: cancel its call)."""
        ...

    def pauses_changed(self) -> None:
        """A queue may have been paused or resumed: reread before the next lease."""
        ...

    @property
    def purged(self) -> int:
        """Finished jobs this process purged so far (retention)."""
        ...


class Jobs:
    """The pool's jobs: submit, look up, list, wait, cancel (``WorkerPool.jobs``).

    Args:
        store: Where jobs live.
        holder: This process's scheduler (its share of the store's jobs).
        seal: Seals payloads written and opens outcomes read (the user's secret).
        max_pending: Active jobs (pending + running) the store may hold; None: no ceiling.
        default_deadline: A job's dispatch deadline unless its options set one.
        build: This process's build: a job submitted here is pinned to it (it runs only on workers of that build)
            unless its routine says ``pinned=False`` (then it runs the build of whichever process dispatches it).
    """

    def __init__(
        self,
        store: JobStore,
        holder: JobHolder,
        seal: Seal,
        *,
        max_pending: int | None,
        default_deadline: float,
        build: str = "",
    ) -> None:
        self.store = store
        self.build = build
        self.seal = seal
        self._holder = holder
        self._max_pending = max_pending
        self._default_deadline = default_deadline
        self._finished: dict[str, asyncio.Future[JobRecord | None]] = {}  # jobs someone here waits for
        self._id_prefix = uuid.uuid4().hex[:16] + "-"  # generated ids: unique per process, then a counter
        self._serial = itertools.count()

    @property
    def purged(self) -> int:
        """Finished jobs this process deleted so far (past ``keep_finished``)."""
        return self._holder.purged

    def notify_finished(self, job_id: str, record: JobRecord | None) -> None:
        """This process just ended an attempt of ``job_id`` (``record``: its final row, if final)."""
        waiter = self._finished.pop(job_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(record)

    async def submit(self, task: CallRecord, options: JobOptions) -> Job:
        """Commit a job for ``task``; returns the active job with the same id instead, if any."""
        now = time.time()
        new, run = self._row(task, options, now)
        due = new.due
        if options.connection is not None:
            return await self._submit_in(options.connection, new)
        # A job with limits is leased through the store's limit check, a delayed one when it is due;
        # one without either may be kept at once.
        owner = "" if (task.queue or task.workflow or due > now) else self._holder.claim()
        record: JobRecord | None = None
        try:
            record, created = await self.store.submit(new, self._max_pending, owner)  # the ceiling: same transaction
        finally:
            if owner:
                self._holder.adopt(record if record is not None and created else None, run)
        assert record is not None  # noqa: S101 - an invariant, stated for the type checker
        if created and not owner:
            self._holder.due_at(due)  # in the store, not kept here: lease it when due (its limits are checked there)
        return Job(self, record)

    def new_job(
        self, task: CallRecord, options: JobOptions, now: float, *, job_id: str = "", due: float | None = None
    ) -> NewJob:
        """The row `submit` writes for ``task`` (``job_id`` and ``due`` override the options': a periodic slot's)."""
        return self._row(task, options, now, job_id=job_id, due=due)[0]

    def _row(
        self, task: CallRecord, options: JobOptions, now: float, *, job_id: str = "", due: float | None = None
    ) -> tuple[NewJob, tuple[CallRecord, RetryPolicy]]:
        """`new_job`, and what its payload holds, as the process that runs it reads it back (`decode`)."""
        if due is None:
            due = options.run_at.timestamp() if options.run_at is not None else now + options.delay
        job_id = job_id or options.job_id or f"{self._id_prefix}{next(self._serial):x}"
        policy = RetryPolicy(options.retry_backoff, options.retry_on)
        fields = payload_fields(task, policy, self.build if options.pinned else "")
        payload = seal_fields(fields, job_id, self.seal)
        row = NewJob(
            id=job_id,
            routine=task.name,
            payload=payload,
            created_at=now,
            deadline=max(now, due) + (options.dispatch_deadline or self._default_deadline),
            max_attempts=1 + options.retries,
            queue=task.queue,
            key=task.key,
            workflow=task.workflow,
            concurrency=task.concurrency,
            total=task.total,
            next_at=due,
            priority=options.priority,
            rate=task.rate[0] if task.rate else 0,
            rate_per=task.rate[1] if task.rate else 0.0,
        )
        return row, (task_of(fields), policy)

    async def _submit_in(self, connection: Any, new: NewJob) -> Job:
        """Submit on the caller's asyncpg connection, inside its transaction (PostgreSQL only)."""
        submit_in = getattr(self.store, "submit_in", None)
        if submit_in is None:
            raise ConfigError(
                f"connection: a submit in the caller's transaction needs a PostgreSQL store, got {self.store!r}"
            )
        if self._max_pending is not None:
            raise ConfigError("connection: a submit in the caller's transaction cannot check max_pending; unset one")
        record, _ = await submit_in(connection, new)
        return Job(self, record)  # the processes on the store (this one too) hear of it on commit

    async def get(self, job_id: str) -> Job | None:
        """The job with this id, from the store (any process's), or None."""
        record = await self.store.get(job_id)
        return None if record is None else Job(self, record)

    async def list(self, state: str | None = None, limit: int = 100) -> list[Job]:
        """Jobs in ``state`` (all states if None), oldest first, at most ``limit``."""
        if state is not None and state not in ACTIVE_STATES | TERMINAL_STATES:
            raise ConfigError(f"state: expected one of {sorted(ACTIVE_STATES | TERMINAL_STATES)}, got {state!r}")
        return [Job(self, r) for r in await self.store.list(state, limit)]

    async def counts(self) -> dict[str, int]:
        """Jobs per state in the store."""
        return await self.store.counts()

    async def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        """The job's record once it is final (see `Job.result`)."""
        async with asyncio.timeout(timeout):
            interval = POLL_MIN_S
            # A job this process's scheduler holds is reported here the moment it
            # ends: no need to read it first (one store round trip less per job).
            record = None if self._holder.holds(job_id) else await self.store.get(job_id)
            while True:
                if record is None and self._holder.holds(job_id):
                    record = await self._until_finished(job_id, None)  # the scheduler always reports
                    continue
                if record is None:
                    raise KeyError(f"no job {job_id!r} in {self.store!r}")
                if record.state in TERMINAL_STATES:
                    return record
                # This process's scheduler resolves `finished` the moment it ends the job;
                # a job another process runs is reread at a growing interval.
                record = await self._until_finished(job_id, interval)
                interval = min(POLL_MAX_S, interval * 2)

    async def _until_finished(self, job_id: str, timeout: float | None) -> JobRecord | None:
        """The final record, if this process ends the job within ``timeout``; else it, reread."""
        finished = self._finished.get(job_id)
        if finished is None or finished.done():
            finished = self._finished[job_id] = asyncio.get_running_loop().create_future()
        if timeout is None:
            final = await asyncio.shield(finished)
        else:
            try:
                final = await asyncio.wait_for(asyncio.shield(finished), timeout)
            except TimeoutError:
                final = None
        return final if final is not None else await self.store.get(job_id)

    async def pause(self, queue: str | Any) -> None:
        """Start none of ``queue``'s pending jobs, in any process on the store, until `resume`.

        Kept in the store. Submissions are still accepted; running jobs
        finish; jobs a process already leased are given back. Other queues
        are untouched. ``queue`` is a queue name or a `pool.Queue`.

        Raises:
            ConfigError: an empty name, or a store that cannot pause.
        """
        await self._pausable().pause(queue_name(queue))
        self._holder.pauses_changed()

    async def resume(self, queue: str | Any) -> None:
        """Start ``queue``'s pending jobs again (within a tick; at once on PostgreSQL, in every process)."""
        await self._pausable().resume(queue_name(queue))
        self._holder.pauses_changed()
        self._holder.due_at(0.0)  # due now: lease what it let through

    async def paused(self) -> builtins.list[str]:
        """The names of the paused queues, sorted."""
        return await self._pausable().paused()

    def _pausable(self) -> PausableStore:
        store = self.store
        inner = getattr(store, "inner", store)  # a RetryingStore wraps the store (and is pausable if it is)
        if not isinstance(inner, PausableStore) or not isinstance(store, PausableStore):
            raise ConfigError(f"pausing queues needs a store that keeps them; {store!r} does not")
        return store

    async def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel the job (see `Job.cancel`); its record afterwards."""
        record = await self.store.cancel(job_id, time.time())
        if record is not None and record.state in ("running", "cancelled"):
            self._holder.cancel_running(job_id)  # this process may hold it, leased or running
        return record


public(Job)
