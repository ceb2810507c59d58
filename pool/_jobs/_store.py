"""The job store protocol and its records: what the scheduler needs of a database. No I/O here.

A store keeps one row per job and one lease row per dispatching process
(*owner*). Every write is atomic and fenced: a write that names an owner
and a state changes the row only if it still has them, so a process that
lost a job (its lease expired, the job was cancelled) cannot overwrite
what another process did since. The state machine:

    submit ──> pending ──lease──> pending (owned) ──mark_running──> running ──finish──> succeeded | failed | cancelled
                  ^        │ unlease               │ fail_pending               │ retry
                  └────────┴───────────────────────┴────────────────────────────┘
    recover / release_owner: an owner's pending jobs lose their owner; its running jobs are pending again
    cancel: pending ──> cancelled; running ──> cancel_requested (its owner cancels it, then finish)
"""

from __future__ import annotations

import builtins
import dataclasses
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, Protocol, runtime_checkable

from .._base import public

JobState = Literal["pending", "running", "succeeded", "failed", "cancelled"]

ACTIVE_STATES: Final[frozenset[str]] = frozenset({"pending", "running"})
TERMINAL_STATES: Final[frozenset[str]] = frozenset({"succeeded", "failed", "cancelled"})


def require_terminal(state: str) -> None:
    """What every store's `JobStore.finish` checks first.

    Raises:
        ValueError: ``state`` is not a terminal state.
    """
    if state not in TERMINAL_STATES:
        raise ValueError(f"state: expected one of {sorted(TERMINAL_STATES)}, got {state!r}")


@dataclasses.dataclass(frozen=True, slots=True)
class NewJob:
    """What `JobStore.submit` writes.

    Attributes:
        id: The idempotency key (a user's ``job_id``, or a generated one).
        routine: The routine's qualified name, for people.
        payload: The call, opaque to the store (see ``_codec``).
        created_at: Submission time, Unix seconds.
        deadline: Unix time by which it must have started, or fail.
        max_attempts: 1 + retries.
        queue, key, workflow: Its limits: `lease` takes a job only while
            fewer than ``concurrency`` jobs of its queue and key, fewer than
            ``total`` of its queue (0: no cap), and no other job of its
            workflow are held by any process.
        concurrency, total: The queue's limits (0 for a job without a queue).
        next_at: When it is due, Unix seconds (None: at once, ``created_at``).
        priority: Higher first among due jobs (FIFO within a priority).
        rate, rate_per: The queue's rate limit: at most ``rate`` leases of its
            queue and key per ``rate_per`` seconds, across processes (0: none).
    """

    id: str
    routine: str
    payload: bytes
    created_at: float
    deadline: float
    max_attempts: int = 1
    queue: str = ""
    key: str = ""
    workflow: str = ""
    concurrency: int = 0
    total: int = 0
    next_at: float | None = None
    priority: int = 0
    rate: int = 0
    rate_per: float = 0.0

    @property
    def due(self) -> float:
        """When the job is due (its ``next_at``, or at once)."""
        return self.created_at if self.next_at is None else self.next_at

    def values(self, owner: str) -> tuple[Any, ...]:
        """The INSERT's arguments for this job, in the column order both stores' INSERT names them."""
        return (
            self.id, self.routine, self.max_attempts, self.created_at, self.deadline, self.due, self.payload,
            self.queue, self.key, self.workflow, owner, self.concurrency, self.total, self.priority, self.rate,
            self.rate_per,
        )  # fmt: skip


LEASE_ORDER: Final[str] = "priority DESC, next_at, created_at, id"
"""The order due jobs are leased in: priority first, then due time, then submission (FIFO)."""

LIMITED_DUE_SQL: Final[str] = """
WITH held AS (
    SELECT queue, key, workflow FROM {table}
    WHERE owner <> '' AND state IN ('pending', 'running') AND (queue <> '' OR workflow <> '')
), held_key AS (SELECT queue, key, count(*) AS n FROM held WHERE queue <> '' GROUP BY queue, key
), held_queue AS (SELECT queue, count(*) AS n FROM held WHERE queue <> '' GROUP BY queue
), held_flow AS (SELECT workflow, count(*) AS n FROM held WHERE workflow <> '' GROUP BY workflow
), due AS (
    SELECT id, queue, key, workflow, concurrency, total, next_at, created_at, priority, rate, rate_per,
        CASE WHEN rate > 0 THEN (SELECT count(*) FROM {starts} AS s
            WHERE s.queue = {table}.queue AND s.key = {table}.key AND s.at > {now} - {table}.rate_per) ELSE 0 END AS recent,
        row_number() OVER (PARTITION BY queue, key ORDER BY priority DESC, next_at, created_at, id) AS nth_key,
        row_number() OVER (PARTITION BY queue ORDER BY priority DESC, next_at, created_at, id) AS nth_queue,
        row_number() OVER (PARTITION BY workflow ORDER BY next_at, created_at, id) AS nth_flow
    FROM {table}
    WHERE state = 'pending' AND owner = '' AND next_at <= {now} AND (queue <> '' OR workflow <> '')
      AND queue NOT IN (SELECT queue FROM leakypool_paused)
)
SELECT due.id, due.next_at, due.created_at, due.priority, due.queue, due.key, due.rate, due.rate_per FROM due
LEFT JOIN held_key ON held_key.queue = due.queue AND held_key.key = due.key
LEFT JOIN held_queue ON held_queue.queue = due.queue
LEFT JOIN held_flow ON held_flow.workflow = due.workflow
WHERE (due.queue = '' OR coalesce(held_key.n, 0) + due.nth_key <= due.concurrency)
  AND (due.queue = '' OR due.total = 0 OR coalesce(held_queue.n, 0) + due.nth_queue <= due.total)
  AND (due.workflow = '' OR coalesce(held_flow.n, 0) + due.nth_flow <= 1)
  AND (due.rate = 0 OR due.recent + due.nth_key <= due.rate)
ORDER BY due.priority DESC, due.next_at, due.created_at, due.id LIMIT {limit}
"""
"""Due jobs with limits that fit, counting what every process holds (pending leased or running).

A candidate's rank among the due jobs of its key, queue and workflow is
added to what is held, so one lease never takes more than fits; a rank
taken by a job that another limit keeps out only makes it more cautious,
never exceed a limit. A rate limit counts the leases of the job's queue
and key in the last ``rate_per`` seconds (``{starts}``, written by the
same transaction; a lease given back unstarted deletes its row, so only
leases that start count). Run inside the lease transaction, under the lease
lock, so two processes never count the same slot free."""

HELD_BACK_SQL: Final[str] = """
UPDATE {table} {rated_index} SET next_at = (SELECT min(s.at) FROM {starts} AS s
    WHERE s.queue = {table}.queue AND s.key = {table}.key AND s.at > {now} - {table}.rate_per) + rate_per
WHERE state = 'pending' AND owner = '' AND next_at <= {now} AND rate > 0
  AND (SELECT count(*) FROM {starts} AS s
       WHERE s.queue = {table}.queue AND s.key = {table}.key AND s.at > {now} - {table}.rate_per) >= rate
"""
"""Due jobs their rate holds back: due again when the oldest lease in their window leaves it.

So a held-back job stays pending with its next due time set (the
scheduler sleeps until then), and is not looked at again before.
``{rated_index}``: SQLite's ``INDEXED BY`` the partial index of rated
pending jobs (its planner would scan every due job), "" for PostgreSQL."""


@dataclasses.dataclass(frozen=True, slots=True)
class JobRecord:
    """One job as stored (times in Unix seconds; ``owner`` "" when no process holds it)."""

    id: str
    routine: str
    state: str
    attempts: int
    max_attempts: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    deadline: float
    next_at: float
    owner: str
    error: str
    payload: bytes
    outcome: bytes | None
    cancel_requested: bool
    queue: str
    key: str
    workflow: str
    priority: int = 0

    @property
    def lease_order(self) -> tuple[int, float, float, str]:
        """Its place among due jobs (see `LEASE_ORDER`)."""
        return (-self.priority, self.next_at, self.created_at, self.id)


@runtime_checkable
class JobStore(Protocol):
    """Where durable jobs live; the scheduler's only view of the database.

    Implementations MUST make each method atomic, MUST commit a write before
    its awaitable completes, MUST NOT return one job from two concurrent
    `lease` calls (from any process), and MUST leave a job in a terminal
    state unchanged except by a new `submit` of its id. ``now`` arguments
    are Unix seconds, given by the caller so tests control time.
    """

    url: str

    async def open(self) -> None:
        """Create the schema on first use, or check it. Raises ConfigError (one line) if unusable."""
        ...

    async def close(self) -> None:
        """Release connections and threads; idempotent."""
        ...

    async def submit(self, job: NewJob, max_active: int | None = None, owner: str = "") -> tuple[JobRecord, bool]:
        """Insert ``job`` as pending: ``(record, True)``; an active job with its id: ``(that, False)``.

        A new job is inserted already leased by ``owner`` when one is given
        (the submitting process dispatches it itself, without a lease round trip).

        Raises:
            AdmissionRejected: ``max_active`` jobs are already active (checked in the same transaction).
        """
        ...

    async def get(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        ...

    async def list(self, state: str | None = None, limit: int = 100, newest: bool = False) -> list[JobRecord]:
        """Jobs in ``state`` (any if None), oldest first (``newest``: latest created first)."""
        ...

    async def counts(self) -> dict[str, int]:
        """Jobs per state, every state present."""
        ...

    async def count_active(self) -> int:
        """Pending + running jobs."""
        ...

    async def lease(self, owner: str, limit: int, now: float) -> builtins.list[JobRecord]:
        """Take up to ``limit`` due, unowned pending jobs for ``owner``, oldest due first."""
        ...

    async def unlease(self, owner: str, ids: builtins.list[str], next_at: float | None = None) -> None:
        """Give back pending jobs ``owner`` holds (optionally due at ``next_at``).

        A job given back has not started: the rate-limit slot its lease took is
        given back with it (a saturated pool would otherwise run far below its rate).
        """
        ...

    def mark_running(self, job_id: str, owner: str, now: float) -> Awaitable[bool]:
        """pending + owned -> running, attempts + 1. False (no change) otherwise (an ``async def`` will do)."""
        ...

    def finish(
        self,
        job_id: str,
        owner: str,
        state: str,
        now: float,
        *,
        outcome: bytes | None,
        error: str = "",
        started: float | None = None,
    ) -> Awaitable[bool]:
        """running + owned -> a terminal ``state``. False (no change) otherwise (an ``async def`` will do).

        With ``started``, also pending + owned: an attempt that ended before it
        was marked running is recorded in this one write (attempts + 1,
        ``started_at = started``), as if marked running first.
        """
        ...

    async def retry(self, job_id: str, owner: str, next_at: float, error: str) -> bool:
        """running + owned -> pending again, unowned, due at ``next_at``."""
        ...

    async def fail_pending(self, job_id: str, owner: str, now: float, error: str, outcome: bytes | None = None) -> bool:
        """pending + owned -> failed (it never ran: capacity timeout, unreadable payload)."""
        ...

    async def cancel(self, job_id: str, now: float) -> JobRecord | None:
        """pending -> cancelled; running -> cancel requested; final -> unchanged. The record after."""
        ...

    async def cancel_requested(self, owner: str) -> builtins.list[str]:
        """Running jobs of ``owner`` whose cancellation was asked for."""
        ...

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        """Renew ``owner``'s lease until ``now + ttl``."""
        ...

    async def recover(self, now: float) -> builtins.list[str]:
        """Re-queue the jobs of owners whose lease expired (or who never had one); their ids."""
        ...

    async def release_owner(self, owner: str, now: float) -> None:
        """A clean shutdown: give back everything ``owner`` holds, drop its lease."""
        ...

    async def oldest_due(self, now: float) -> float | None:
        """The earliest ``next_at`` among unowned pending jobs, or None."""
        ...


@runtime_checkable
class WatchableStore(Protocol):
    """A store that can tell one process what the others did (optional; PostgreSQL's LISTEN/NOTIFY).

    Without it, a process sees other processes' submissions, freed limit
    slots and cancel requests at its backstop tick (``lease_ttl / 3``).
    """

    async def watch(self, notice: Callable[[str, str], None]) -> None:
        """Call ``notice(kind, arg)`` for other processes' notices until cancelled.

        Kinds: ``"due"`` (jobs may be leasable: submitted, given back, a
        limit slot freed), ``"cancel"`` with the owner asked to cancel a
        running job. Calls ``notice("due", "")`` once listening.

        Raises:
            StoreError: the store could not be reached or the listening was lost (call again).
        """
        ...


@runtime_checkable
class MaintainedStore(Protocol):
    """What retention and an operator (``leakypool jobs``) need of a store beyond `JobStore` (both built-in stores).

    Kept apart from `JobStore` so a store written for an earlier release still is one.
    """

    async def purge(self, finished_before: float, limit: int) -> int:
        """Delete at most ``limit`` final jobs that finished before ``finished_before``; how many went.

        Never a pending or running job. One process purges at a time: while
        another one does, this returns 0 at once (PostgreSQL), or waits for
        the file's write lock, held for one bounded batch (SQLite).
        """
        ...

    async def next_due(self, now: float) -> float | None:
        """The earliest ``next_at`` after ``now`` among unowned pending jobs, or None."""
        ...

    async def select(self, state: str | None = None, routine: str | None = None, limit: int = 100) -> list[JobRecord]:
        """Jobs in ``state`` of ``routine`` (any if None), newest first."""
        ...

    async def schedule_slot(self, name: str, slot: float, job: NewJob | None) -> float | None:
        """Record that schedule ``name`` reached ``slot``; the slot it had recorded before (None: none).

        With ``job``: if the recorded slot is older than ``slot`` (or none),
        record ``slot`` and insert ``job`` (unless its id exists), in one
        transaction: of all the processes that try one slot, one submits it.
        Without: record ``slot`` only if the schedule has no slot yet (its start).
        """
        ...

    async def requeue(self, job_id: str, now: float) -> JobRecord | None:
        """A failed or cancelled job -> pending, due now, one more attempt allowed; history kept.

        Its attempt count and last error stay; its dispatch deadline starts
        again from ``now``. Anything else is left as it is. The record after, or None (no such job).
        """
        ...


async def next_due(store: JobStore, now: float) -> float:
    """When the store's next job comes due after ``now`` (inf: none known), for a store of any release."""
    if isinstance(store, MaintainedStore):
        due = await store.next_due(now)
    else:
        due = await store.oldest_due(now)  # due already but not leased: its limits are full; events wake for it
        due = due if due is not None and due > now else None
    return math.inf if due is None else due


@runtime_checkable
class PausableStore(Protocol):
    """A store that keeps paused queues (both built-in stores; optional for others).

    While a queue is paused its pending jobs MUST NOT be returned by
    `JobStore.lease` (from any process); submissions are still accepted.
    """

    async def pause(self, queue: str) -> None:
        """Pause ``queue`` (idempotent)."""
        ...

    async def resume(self, queue: str) -> None:
        """Resume ``queue`` (idempotent).

        Time spent paused SHOULD NOT count against a due job's dispatch
        deadline: the built-in stores push it on by that time, atomically
        with ending the pause.
        """
        ...

    async def paused(self) -> list[str]:
        """The paused queues' names, sorted."""
        ...


public(JobStore)


@runtime_checkable
class ResealableStore(Protocol):
    """A store whose rows ``leakypool jobs STORE_URL sign`` can seal (both built-in stores; optional for others)."""

    async def reseal(self, job_id: str, payload: bytes, outcome: bytes | None, was: tuple[bytes, bytes | None]) -> bool:
        """Write ``payload`` and ``outcome`` (sealed now) in place of ``was`` (what the row held); False if it changed.

        The migration step of ``leakypool jobs STORE_URL sign``: compare and set, so a row rewritten
        meanwhile (an attempt's outcome landing) is left as it is.
        """
        ...
