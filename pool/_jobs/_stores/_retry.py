"""Riding over a store restart: every store call retries a lost connection, with back-off, for a while.

    a call ──> the store ──ok──> its answer
                  │ StoreError: the connection was lost (`lost_connection`)?
                  │   no: raise it (a bug, a refusal: trying again cannot help)
                  │   yes: within ``store_retry`` s? wait `delay_s` (doubling, capped, jittered), reconnect, try again
                  └── past it: raise the last StoreError (one line, no password)

A write whose answer was lost may have committed. Trying it again must
not do it twice, so the writes that are not idempotent look first:
``submit`` finds its own row (the id, its creation time and payload were
fixed before the first try), ``mark_running`` and ``finish`` find the row
already in the state they were writing. Everything else a store does is
idempotent, but for a lease: one that committed before its answer was
lost leaves jobs owned by this process that it does not know of, so a
lease that failed that way marks the store `lease_in_doubt` and the
scheduler gives back what it does not hold (`reconcile`, also run every
lease tick). A call answered after an outage calls ``recovered``.

`RetryingStore` wraps any `JobStore`, so the scheduler, the recorder, the
owner lease and ``pool.jobs`` all get the same policy in one place.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Protocol, TypeVar

from ..._base import RANDOM, lost_connection
from ..._errors import StoreError
from .._store import JobRecord, JobStore, MaintainedStore, NewJob, PausableStore

_log = logging.getLogger("leakypool.jobs")

FIRST_DELAY_S: Final[float] = 0.05
"""Wait before the second try (a restart of a fraction of a second is ridden over at once)."""

MAX_DELAY_S: Final[float] = 1.0
"""Longest wait between two tries (a server back up is found within a second)."""

LAST_TRY_S: Final[float] = 1.0
"""A call may run this long past ``store_retry`` (its last try), then it fails: the bound on a silent store."""


T = TypeVar("T")

_NO_KWARGS: Final[dict[str, Any]] = {}  # a call without keyword arguments (read, never written)
_Strays = tuple[list[str], list[str]]  # (pending ids given back, running ids made pending again)


def delay_s(tries: int, elapsed_s: float, budget_s: float, jitter: float) -> float | None:
    """Seconds to wait before try number ``tries + 1``, or None to give up (I/O-free).

    Doubling from `FIRST_DELAY_S` to `MAX_DELAY_S`, scaled by ``jitter`` in
    [0.5, 1] (retries of many callers do not land together), and clipped so
    the last try happens at the end of the budget, never after it.

    Args:
        tries: Tries made so far (>= 1).
        elapsed_s: Seconds since the first try failed.
        budget_s: ``store_retry``: how long to keep trying.
        jitter: A number in [0, 1) (random in use; fixed in tests).
    """
    remaining = budget_s - elapsed_s
    if remaining <= 0:
        return None
    base = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** min(tries - 1, 16))
    return min(remaining, base * (0.5 + jitter / 2))


async def retrying(
    what: str,
    budget_s: float,
    call: Callable[[], Awaitable[T]],
    store: str = "the store",
    *,
    args: tuple[Any, ...] = (),
    kwargs: dict[str, Any] | None = None,
    again: Callable[..., Awaitable[T]] | None = None,
    recovered: Callable[[], None] = lambda: None,
    log_each: bool = False,
) -> T:
    """``call()``, tried again while the store is out of reach, for ``budget_s`` seconds (0: one try).

    The whole call ends within ``budget_s`` + `LAST_TRY_S` even when the
    store does not refuse but hangs (a server stopped, a network that drops
    packets): then the last error, or "no answer". A write that timed out
    may still commit: the caller cannot tell, as with any lost answer.

    The first try runs inline (no frame, no closure of the retry loop on
    the path every store call takes: the jobs path makes two per job), and
    takes its arguments as ``args`` and ``kwargs`` rather than in a closure:
    a job's calls wait in a batch by the hundred, and each closure kept its
    captured variables as cells the garbage collector walks meanwhile.

    Args:
        what: What the call does, for log lines ("opening the store").
        budget_s: ``store_retry``.
        call: The call (with ``args`` and ``kwargs``).
        store: The store's name, for the "no answer" error.
        args, kwargs: What ``call`` (and ``again``) is called with.
        again: The call for the tries after the first (a write that looks
            first whether the lost try committed), with the same arguments; default ``call``.
        recovered: Called when a try after a lost connection succeeds.
        log_each: Log every back-off (a process starting while the store is
            down says why it waits), not only the first.

    Raises:
        StoreError: not a lost connection, or still lost (or silent) at the end of the budget.
    """
    if kwargs is None:
        kwargs = _NO_KWARGS
    if budget_s <= 0:
        return await call(*args, **kwargs)
    errors: list[StoreError] = []
    bound = _bounds().enter(budget_s + LAST_TRY_S)
    try:
        try:
            return await call(*args, **kwargs)
        except StoreError as exc:
            if not lost_connection(exc):
                raise
            errors.append(exc)
        result = await _tries(what, budget_s, functools.partial(again or call, *args, **kwargs), errors, log_each)
        recovered()
        return result
    except asyncio.CancelledError:
        if not bound.ended_by_us():
            raise
        if errors:
            raise errors[-1]  # noqa: B904 - (its cause, the lost connection, kept)
        raise StoreError(f"{store}: no answer within {budget_s + LAST_TRY_S:g}s while {what}") from None
    finally:
        bound.leave()


class _Bound:
    """One store call's deadline (`_Bounds`): its task is cancelled if it is still running then."""

    __slots__ = ("_line", "cancelling", "deadline", "expired", "task")

    def __init__(self, line: dict[_Bound, None], task: asyncio.Task[Any], deadline: float) -> None:
        self._line = line
        self.task = task
        self.deadline = deadline
        self.cancelling = task.cancelling()  # cancellations already requested when it began (not ours)
        self.expired = False

    def ended_by_us(self) -> bool:
        """The task is being cancelled because this bound expired, and by nothing else (then it is not any more)."""
        return self.expired and self.task.uncancel() <= self.cancelling

    def leave(self) -> None:
        """The call ended (whichever way)."""
        self._line.pop(self, None)


class _Bounds:
    """The deadlines of the store calls in flight on one loop, kept by one timer, not one per call.

    `asyncio.timeout` makes a timer handle per call and cancels it after it; the jobs path makes two store
    calls a job (~10 µs of a job's ~120 in the dispatching process). Calls of the same length of bound
    start in deadline order, so each length keeps its calls in a line in insertion order (a dict: an ended
    call leaves in O(1)), and one timer is armed for the oldest call of all; when it fires, what has
    expired is cancelled and the timer is armed again for the oldest call left. A steady stream of calls
    arms it about once a bound, whatever the rate.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lines: dict[float, dict[_Bound, None]] = {}  # length of bound -> its calls, oldest first
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def enter(self, seconds: float) -> _Bound:
        """A bound of ``seconds`` from now on the current task's call.

        Raises:
            RuntimeError: not called from a task.
        """
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a bounded store call must run in a task")
        line = self._lines.get(seconds)
        if line is None:
            line = self._lines[seconds] = {}
        bound = _Bound(line, task, self._loop.time() + seconds)
        line[bound] = None
        if bound.deadline < self._timer_at:
            self._arm(bound.deadline)
        return bound

    def _arm(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = self._loop.call_at(at, self._fire), at

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now = self._loop.time()
        next_at = float("inf")
        for line in self._lines.values():
            while line:
                oldest = next(iter(line))
                if oldest.deadline > now:
                    next_at = min(next_at, oldest.deadline)
                    break
                del line[oldest]
                oldest.expired = True
                oldest.task.cancel()
        if next_at < float("inf"):
            self._arm(next_at)


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Bounds] = weakref.WeakKeyDictionary()


def _bounds() -> _Bounds:
    loop = asyncio.get_running_loop()
    bounds = _by_loop.get(loop)
    if bounds is None:
        bounds = _by_loop[loop] = _Bounds(loop)
    return bounds


async def _tries(
    what: str, budget_s: float, call: Callable[[], Awaitable[T]], errors: list[StoreError], log_each: bool = False
) -> T:
    """The tries after a first one lost its connection (``errors`` holds its error)."""
    tries, since = 1, time.monotonic()
    while True:
        wait = delay_s(tries, time.monotonic() - since, budget_s, RANDOM.random())
        if wait is None:
            raise errors[-1]
        if log_each:
            _log.warning(
                "%s (while %s); try %d, again in %.2fs (gives up %.1fs from now: store_retry %gs)",
                errors[-1],
                what,
                tries,
                wait,
                max(0.0, budget_s - (time.monotonic() - since)),
                budget_s,
            )
        elif tries == 1:
            _log.info("store out of reach while %s (%s); trying again for up to %gs", what, errors[-1], budget_s)
        await asyncio.sleep(wait)
        try:
            result = await call()
        except StoreError as exc:
            tries += 1
            if not lost_connection(exc):
                raise
            errors.append(exc)
            continue
        _log.info("store back after %d tries (%s)", tries + 1, what)
        return result


class RetryingStore:
    """``store`` with `retrying` around every call (see the module); other attributes pass through.

    Args:
        store: The store to wrap.
        budget_s: ``store_retry``: seconds to keep trying a lost connection (0: one try).
        recovered: Called when a call succeeds after a lost connection (the store is back).
    """

    def __init__(self, store: JobStore, budget_s: float, recovered: Callable[[], None] = lambda: None) -> None:
        self.inner = store
        self.url = store.url
        self.budget_s = budget_s
        self.lease_in_doubt = False  # a lease failed after it may have committed: see `reconcile`
        self._recovered = recovered
        self._name = repr(store)  # names it in "no answer" errors (a PostgreSQL URL without its password)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # open, close, watch, and whatever else the store has

    def __repr__(self) -> str:
        return repr(self.inner)

    def _retry(
        self,
        what: str,
        call: Callable[..., Awaitable[T]],
        again: Callable[..., Awaitable[T]] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Coroutine[Any, Any, T]:
        """``call(*args, **kwargs)`` under `retrying` (``again`` for the tries after the first); ``recovered`` when
        it answers after a lost connection."""
        return retrying(
            what, self.budget_s, call, self._name, args=args, kwargs=kwargs, again=again, recovered=self._recovered
        )

    async def open(self) -> None:
        """Open the store, waiting (a log line per back-off) up to ``store_retry`` for a server out of reach.

        A process started while the database restarts or fails over waits it
        out like a running one (issue 35); a store that cannot work (a bad
        URL, refused credentials, a missing database, a newer schema: a
        `ConfigError`) fails at once.

        Raises:
            ConfigError: the store cannot work.
            StoreError: still out of reach after ``store_retry`` seconds (one line, no password).
        """
        await retrying("opening the store", self.budget_s, self.inner.open, self._name, log_each=True)

    # The three writes every job makes pass their arguments on rather than close over them (see `retrying`).

    def submit(
        self, job: NewJob, max_active: int | None = None, owner: str = ""
    ) -> Coroutine[Any, Any, tuple[JobRecord, bool]]:
        return self._retry(f"submitting job {job.id}", self.inner.submit, self._submit_again, job, max_active, owner)

    async def _submit_again(self, job: NewJob, max_active: int | None, owner: str) -> tuple[JobRecord, bool]:
        record = await self.inner.get(job.id)  # the last try may have committed before its answer was lost
        if record is not None and _same_submission(record, job):
            return record, True
        return await self.inner.submit(job, max_active, owner)

    def mark_running(self, job_id: str, owner: str, now: float) -> Awaitable[bool]:
        return self._retry(
            f"marking job {job_id} running", self.inner.mark_running, self._mark_running_again, job_id, owner, now
        )

    async def _mark_running_again(self, job_id: str, owner: str, now: float) -> bool:
        record = await self.inner.get(job_id)
        if record is not None and (record.state, record.owner, record.started_at) == ("running", owner, now):
            return True
        return await self.inner.mark_running(job_id, owner, now)

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
        return self._retry(
            f"recording job {job_id}",
            self.inner.finish,
            self._finish_again,
            job_id,
            owner,
            state,
            now,
            outcome=outcome,
            error=error,
            started=started,
        )

    async def _finish_again(
        self,
        job_id: str,
        owner: str,
        state: str,
        now: float,
        *,
        outcome: bytes | None,
        error: str,
        started: float | None,
    ) -> bool:
        record = await self.inner.get(job_id)
        if record is not None and record.state == state and record.finished_at == now and record.owner == "":
            return True
        return await self.inner.finish(job_id, owner, state, now, outcome=outcome, error=error, started=started)

    async def get(self, job_id: str) -> JobRecord | None:
        return await self._retry("looking a job up", lambda: self.inner.get(job_id))

    async def list(self, state: str | None = None, limit: int = 100, newest: bool = False) -> list[JobRecord]:
        return await self._retry(
            "listing jobs", lambda: self.inner.list(state, limit, newest) if newest else self.inner.list(state, limit)
        )

    async def counts(self) -> dict[str, int]:
        return await self._retry("counting jobs", self.inner.counts)

    async def count_active(self) -> int:
        return await self._retry("counting active jobs", self.inner.count_active)

    async def lease(self, owner: str, limit: int, now: float) -> builtins.list[JobRecord]:
        async def once() -> list[JobRecord]:
            try:
                return await self.inner.lease(owner, limit, now)
            except StoreError as exc:
                self.lease_in_doubt = self.lease_in_doubt or lost_connection(exc)  # its commit may have landed
                raise
            except asyncio.CancelledError:
                self.lease_in_doubt = True  # cut off (the store_retry bound, a close): its commit may land later
                raise

        return await self._retry("leasing jobs", once)

    async def reconcile(self, owner: str, held: builtins.list[str], now: float) -> _Strays:
        """Give back what the store has ``owner`` hold beyond ``held`` (none on its way in): see `_strays`."""
        strays = await self._retry("reconciling held jobs", lambda: _reconcile(self.inner, owner, held, now))
        self.lease_in_doubt = False  # (the scheduler leases only after this: no lease ran meanwhile)
        return strays

    async def unlease(self, owner: str, ids: builtins.list[str], next_at: float | None = None) -> None:
        await self._retry("giving jobs back", lambda: self.inner.unlease(owner, ids, next_at))

    async def retry(self, job_id: str, owner: str, next_at: float, error: str) -> bool:
        return await self._retry(f"re-queueing job {job_id}", lambda: self.inner.retry(job_id, owner, next_at, error))

    async def fail_pending(self, job_id: str, owner: str, now: float, error: str, outcome: bytes | None = None) -> bool:
        return await self._retry(
            f"failing job {job_id}", lambda: self.inner.fail_pending(job_id, owner, now, error, outcome)
        )

    async def cancel(self, job_id: str, now: float) -> JobRecord | None:
        return await self._retry(f"cancelling job {job_id}", lambda: self.inner.cancel(job_id, now))

    async def cancel_requested(self, owner: str) -> builtins.list[str]:
        return await self._retry("polling cancel requests", lambda: self.inner.cancel_requested(owner))

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        await self._retry("renewing the owner lease", lambda: self.inner.heartbeat(owner, now, ttl))

    async def recover(self, now: float) -> builtins.list[str]:
        return await self._retry("re-queueing dead owners' jobs", lambda: self.inner.recover(now))

    async def release_owner(self, owner: str, now: float) -> None:
        await self._retry("handing jobs back", lambda: self.inner.release_owner(owner, now))

    async def oldest_due(self, now: float) -> float | None:
        return await self._retry("reading the next due time", lambda: self.inner.oldest_due(now))

    async def pause(self, queue: str) -> None:
        await self._retry(f"pausing queue {queue!r}", lambda: self._pausable().pause(queue))

    async def resume(self, queue: str) -> None:
        await self._retry(f"resuming queue {queue!r}", lambda: self._pausable().resume(queue))

    async def paused(self) -> builtins.list[str]:
        return await self._retry("reading paused queues", lambda: self._pausable().paused())

    def _pausable(self) -> PausableStore:
        """The wrapped store as a `PausableStore`; AttributeError (as a plain attribute look-up) if it is none."""
        if not isinstance(self.inner, PausableStore):
            raise AttributeError(f"{self.inner!r} keeps no paused queues")  # noqa: TRY004 - what a look-up of a missing method raises, as before
        return self.inner


class MaintainedJobStore(JobStore, MaintainedStore, Protocol):
    """A `JobStore` that is also a `MaintainedStore` (both built-in stores): what `RetryingMaintainedStore` wraps."""


class RetryingMaintainedStore(RetryingStore):
    """`RetryingStore` of a `MaintainedStore`: retention, schedules and requeues ride over a restart too.

    A class apart, so that wrapping a store that is no `MaintainedStore` does not make it look like one.

    Args:
        store: The store to wrap (a `MaintainedStore`).
        budget_s: ``store_retry``.
    """

    def __init__(
        self, store: MaintainedJobStore, budget_s: float, recovered: Callable[[], None] = lambda: None
    ) -> None:
        super().__init__(store, budget_s, recovered)
        self.maintained = store  # `inner`, typed as what this class relies on

    async def purge(self, finished_before: float, limit: int) -> int:
        """See `MaintainedStore.purge`. Safe to try again: a batch that committed before its answer was lost
        is gone, the next try deletes the next batch (the count returned is the last try's)."""
        return await self._retry("purging finished jobs", lambda: self.maintained.purge(finished_before, limit))

    async def next_due(self, now: float) -> float | None:
        return await self._retry("reading the next due time", lambda: self.maintained.next_due(now))

    async def select(self, state: str | None = None, routine: str | None = None, limit: int = 100) -> list[JobRecord]:
        return await self._retry("selecting jobs", lambda: self.maintained.select(state, routine, limit))

    async def schedule_slot(self, name: str, slot: float, job: NewJob | None) -> float | None:
        """See `MaintainedStore.schedule_slot`. Safe to try again: the slot is recorded and its job inserted
        only if the recorded slot is older, and the job id names the slot; a try after one that committed
        finds ``slot`` recorded and inserts nothing (it returns ``slot`` as the slot recorded before)."""
        return await self._retry(
            f"recording slot {slot:.0f} of schedule {name}", lambda: self.maintained.schedule_slot(name, slot, job)
        )

    async def requeue(self, job_id: str, now: float) -> JobRecord | None:
        """See `MaintainedStore.requeue`. Not idempotent alone (the job could run and fail again between two
        tries, and be re-queued twice), so a try after a lost answer looks first: a row due at ``now`` is
        this call's own write (``requeue`` sets ``next_at = now``, and nothing else does it to that instant)."""
        tried = False

        async def once() -> JobRecord | None:
            nonlocal tried
            if tried:
                record = await self.inner.get(job_id)
                if record is None or record.next_at == now:
                    return record
            tried = True
            return await self.maintained.requeue(job_id, now)

        return await self._retry(f"re-queueing job {job_id}", once)


def retrying_store(store: JobStore, budget_s: float, recovered: Callable[[], None] = lambda: None) -> RetryingStore:
    """``store`` with the retry policy on every call it has (a `RetryingMaintainedStore` for a `MaintainedStore`)."""
    if isinstance(store, MaintainedStore):
        return RetryingMaintainedStore(store, budget_s, recovered)
    return RetryingStore(store, budget_s, recovered)


async def _reconcile(store: JobStore, owner: str, keep: list[str], now: float) -> tuple[list[str], list[str]]:
    reconcile = getattr(store, "reconcile", None)  # a store of one's own may not have it
    return ([], []) if reconcile is None else await reconcile(owner, keep, now)


def _same_submission(record: JobRecord, job: NewJob) -> bool:
    """Whether ``record`` is the row ``job``'s own earlier try wrote (not an older job with the id)."""
    return record.created_at == job.created_at and record.routine == job.routine and record.payload == job.payload
