"""One attempt of a job, and what to do with its outcome: the scheduler's I/O-free decisions.

outcome ──> decide() ──> succeeded                   (a value, within RESULT_LIMIT_BYTES)
                     ├─> failed                      (the routine's error, or ours)
                     └─> retry in N s                (WorkerBroken, or a type in retry_on,
                                                      while attempts remain: exponential, jittered)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from .._base import RANDOM
from .._call import CallRecord, outcome_result
from .._errors import CapacityTimeout, SerializationError, StoreError, VersionMismatch, WorkerBroken
from .._transport import leakypool_pb2 as pb
from .._transport import wire
from ._codec import RetryPolicy
from ._store import JobRecord

_log = logging.getLogger("leakypool.jobs")

RESULT_LIMIT_BYTES: Final[int] = 16 * 1024 * 1024
"""A job whose pickled result is larger fails (the store keeps results, not blobs of any size)."""

MAX_BACKOFF_S: Final[float] = 300.0
"""Retry back-off grows exponentially up to this."""

RETRY_STORE_MIN_S: Final[float] = 0.05
"""First wait before trying the store again after it failed."""

RETRY_STORE_MAX_S: Final[float] = 5.0
"""Longest wait between tries while the store is away."""


T = TypeVar("T")


class Attempt:
    """One leased job on its way to a worker, and back."""

    __slots__ = (
        "blocked_at",
        "cancel_requested",
        "job",
        "lease_epoch",
        "mismatch",
        "policy",
        "runner",
        "started",
        "task",
    )

    def __init__(self, job: JobRecord, task: CallRecord, policy: RetryPolicy) -> None:
        self.job = job
        self.task = task
        self.policy = policy
        self.runner: asyncio.Task[None] | None = None
        self.cancel_requested = False
        self.blocked_at = -1  # the capacity epoch in which its limit was full
        self.started: float | None = None
        self.lease_epoch = 0  # the owner lease's epoch it came in: it starts only in that one (`_lease`)
        self.mismatch: VersionMismatch | None = None  # its last placement found no worker of its version


def due_order(attempt: Attempt) -> tuple[int, float, float, str]:
    """Waiting jobs go to workers in the order the store leases them: priority, due time, submission."""
    return attempt.job.lease_order


def expired(
    waiting: list[Attempt], now: float
) -> tuple[list[Attempt], list[tuple[Attempt, CapacityTimeout | VersionMismatch]]]:
    """Split the waiting jobs: those still within their dispatch deadline (in order), and the rest with the
    error to fail them with (they never ran): `VersionMismatch`, naming the version, for one that found no
    worker of its version (never a silent capacity timeout), else `CapacityTimeout`."""
    keep, gone = [], []
    for attempt in waiting:
        if attempt.job.deadline > now:
            keep.append(attempt)
            continue
        waited = attempt.job.deadline - attempt.job.created_at
        if attempt.mismatch is not None:
            error: CapacityTimeout | VersionMismatch = VersionMismatch(
                f"{attempt.task.name}() found no worker of its version within {waited:g}s (dispatch_deadline): "
                f"{attempt.mismatch}"
            )
        else:
            error = CapacityTimeout(f"{attempt.task.name}() found no worker within {waited:g}s (dispatch_deadline)")
        gone.append((attempt, error))
    return keep, gone


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What to write for an attempt's outcome: a final state, or a retry after ``retry_in`` seconds."""

    state: str
    outcome: pb.Outcome | None
    error: str
    retry_in: float | None = None


def decide(job: JobRecord, policy: RetryPolicy, outcome: pb.Outcome) -> Verdict:
    """The verdict on one attempt's outcome (``job`` as leased, before this attempt counted)."""
    if outcome.kind == pb.Outcome.RETURN and outcome.value[:1] == b"\x00":  # large buffers out of band (`_buffers`)
        stored = pb.Outcome()
        stored.CopyFrom(outcome)
        stored.value = wire.inline(outcome.value)  # a store keeps bytes, not descriptors
        outcome = stored
    if outcome.kind == pb.Outcome.RETURN and len(outcome.value) > RESULT_LIMIT_BYTES:
        error = SerializationError(
            f"the result of {job.routine}() is {len(outcome.value):,} bytes, over the "
            f"{RESULT_LIMIT_BYTES:,}-byte limit of a stored job result"
        )
        outcome = raised(error, job.routine)
    if outcome.kind == pb.Outcome.RETURN:
        return Verdict("succeeded", outcome, "")
    _, exc = outcome_result(outcome, job.routine)
    attempts = job.attempts + 1
    if isinstance(exc, (WorkerBroken, policy.retry_on)) and attempts < job.max_attempts:
        delay = min(MAX_BACKOFF_S, policy.retry_backoff * 2 ** (attempts - 1))
        delay *= 0.5 + RANDOM.random()  # jitter: retries of a burst do not land together
        return Verdict("pending", None, describe(exc), retry_in=delay)
    return Verdict("failed", outcome, describe(exc))


class Outage:
    """A store outage as one task sees it: logged once when it starts and once when it ends, with back-off."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.since = 0.0
        self._failures = 0

    def failed(self, exc: BaseException) -> None:
        if not self.since:
            self.since = time.monotonic()
            _log.warning("store unavailable while %s (%s); retrying with back-off", self.what, exc)
        self._failures += 1

    def delay(self) -> float:
        """Seconds before the next try: doubling from `RETRY_STORE_MIN_S` to `RETRY_STORE_MAX_S`."""
        return min(RETRY_STORE_MAX_S, RETRY_STORE_MIN_S * 2 ** min(self._failures, 16))

    def over(self) -> bool:
        """The store answered: True if that ends an outage (logged)."""
        if not self.since:
            return False
        _log.warning("store back after %.1fs (%s)", time.monotonic() - self.since, self.what)
        self.since, self._failures = 0.0, 0
        return True


async def persist(
    what: str, write: Callable[..., Awaitable[T]], *args: Any, failed: StoreError | None = None, **kwargs: Any
) -> T:
    """Run a store write, ``write(*args, **kwargs)``, until it succeeds: an outcome is never dropped for a store outage.

    While the store is away the owner lease is not renewed either; if the
    outage outlasts it, another process revives the job and this write
    then finds the job no longer ours (and says so). The arguments are
    passed on, not closed over (see `_stores._retry.retrying`). ``failed``:
    the first try, made by the caller, failed with it (a write every job
    makes is tried once inline, without this coroutine).
    """
    if failed is None:
        try:
            return await write(*args, **kwargs)  # (no outage object unless the store is away)
        except StoreError as exc:
            failed = exc
    outage = Outage(what)
    outage.failed(failed)
    while True:
        await asyncio.sleep(outage.delay())
        try:
            result = await write(*args, **kwargs)
        except StoreError as exc:
            outage.failed(exc)
            continue
        outage.over()
        return result


def raised(error: BaseException, name: str) -> pb.Outcome:
    value, tb = wire.pack_exception(error, name)
    return pb.Outcome(kind=pb.Outcome.RAISE, value=value, traceback=tb)


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
