"""What an attempt leaves in the store once a worker accepted it: running, then its outcome.

    accepted ──> the worker's outcome within RUNNING_AFTER_S? ──> finish straight from pending (one write)
        │ no: mark_running ──> the worker's outcome ──> decide() ──> finish (succeeded | failed)
                     │ not ours any more: cancel the call          └──> retry (pending again, later)
                     └ cancelled by request: abort the call, finish as cancelled

A job that ends within a moment is recorded in one write (attempts and its
start included), not two: nobody could have seen it running anyway. One
that runs longer is marked running first, so the store shows it running.

Every write is retried while the store is away (`persist`): an outcome is
never dropped for an outage; a write the store refuses because the job is no
longer ours (its lease expired meanwhile) is logged and dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Final

from .._call import CANCEL_CONFIRM_S
from .._errors import StoreError, WorkerBroken
from .._transport import OutgoingCall, Seal
from .._transport import leakypool_pb2 as pb
from ._attempt import Attempt, decide, describe, persist, raised
from ._codec import seal_outcome
from ._store import JobRecord, JobStore

_log = logging.getLogger("leakypool.jobs")

RUNNING_AFTER_S: Final[float] = 0.005
"""An attempt still going after this long is marked running before its outcome is awaited further."""


class Recorder:
    """Records the attempts one dispatching process (``owner``) runs.

    Args:
        store: The job store.
        owner: The process's owner id (every write is fenced by it).
        seal: Seals each outcome written for its job (the caller's ``result()`` opens it).
    """

    def __init__(self, store: JobStore, owner: str, seal: Seal) -> None:
        self.store = store
        self.owner = owner
        self.seal = seal

    async def follow(self, attempt: Attempt, call: OutgoingCall) -> JobRecord | None:
        """Record the accepted attempt: running (unless it ends at once), then its outcome; the final record."""
        job = attempt.job
        started = attempt.started = time.time()
        receiving = call.next_item()  # (often done already: a quick job's outcome comes with its Accept)
        marked = False
        try:
            if not receiving.done():
                await asyncio.wait((receiving,), timeout=RUNNING_AFTER_S)
                if not receiving.done():
                    if not await self._mark(attempt, started):
                        call.cancel()  # cancelled (or taken) meanwhile
                        return None
                    marked = True
            item = await receiving
            if isinstance(item, WorkerBroken):
                outcome = raised(item, job.routine)
            elif isinstance(item, BaseException):
                raise item
            else:
                outcome = item.outcome
        except asyncio.CancelledError:
            receiving.cancel()
            await call.abort(CANCEL_CONFIRM_S)
            if not attempt.cancel_requested:
                raise  # the pool is closing: release_owner re-queues it
            return await self._finish(attempt, "cancelled", None, "cancelled by request", marked)
        if not marked and decide(job, attempt.policy, outcome).retry_in is not None:
            if not await self._mark(
                attempt, started
            ):  # a retry starts from running: mark it, as a longer attempt would be
                return None
            marked = True
        return await self._record(attempt, outcome, marked)

    async def fail_pending(self, job: JobRecord, error: BaseException) -> None:
        """A held job that never ran fails (no worker within its deadline, an unreadable payload)."""
        outcome = seal_outcome(job.id, raised(error, job.routine).SerializeToString(), self.seal)
        await persist(
            f"failing job {job.id}",
            lambda: self.store.fail_pending(job.id, self.owner, time.time(), describe(error), outcome),
        )

    async def _mark(self, attempt: Attempt, started: float) -> bool:
        job = attempt.job
        try:
            return await self.store.mark_running(job.id, self.owner, started)
        except StoreError:
            # The write may have committed before the connection broke: ask again,
            # and count "already running, ours" as done (the worker runs it meanwhile).
            return await persist(f"marking job {job.id} running", lambda: self._mark_again(attempt))

    async def _mark_again(self, attempt: Attempt) -> bool:
        job = attempt.job
        record = await self.store.get(job.id)
        if record is not None and record.state == "running" and record.owner == self.owner:
            return True
        return await self.store.mark_running(job.id, self.owner, attempt.started or time.time())

    async def _record(self, attempt: Attempt, outcome: pb.Outcome, marked: bool = True) -> JobRecord | None:
        """Commit an attempt's outcome (or schedule its retry); the final record, if it is final."""
        job = attempt.job
        verdict = decide(job, attempt.policy, outcome)
        if verdict.retry_in is None:
            return await self._finish(attempt, verdict.state, verdict.outcome, verdict.error, marked)
        due = time.time() + verdict.retry_in
        await persist(f"re-queueing job {job.id}", lambda: self.store.retry(job.id, self.owner, due, verdict.error))
        _log.info(
            "job %s: attempt %d failed (%s); retrying in %.2fs",
            job.id,
            job.attempts + 1,
            verdict.error,
            verdict.retry_in,
        )
        return None

    async def _finish(
        self, attempt: Attempt, state: str, outcome: pb.Outcome | None, error: str, marked: bool = True
    ) -> JobRecord | None:
        job = attempt.job
        data = None if outcome is None else seal_outcome(job.id, outcome.SerializeToString(), self.seal)
        now = time.time()
        started = None if marked else attempt.started  # not marked running: this write does it too
        write = self.store.finish
        try:  # once inline: every job's outcome passes here (`persist` only if the store is away)
            finished = await write(job.id, self.owner, state, now, outcome=data, error=error, started=started)
        except StoreError as exc:
            finished = await persist(
                f"recording job {job.id}",
                write,
                job.id,
                self.owner,
                state,
                now,
                failed=exc,
                outcome=data,
                error=error,
                started=started,
            )
        if not finished:
            _log.warning("job %s: its outcome (%s) was not recorded: the job is no longer ours", job.id, state)
            return None
        return JobRecord(
            job.id,
            job.routine,
            state,
            job.attempts + 1,
            job.max_attempts,
            job.created_at,
            attempt.started,
            now,
            job.deadline,
            job.next_at,
            "",
            error,
            job.payload,
            data,
            False,
            job.queue,
            job.key,
            job.workflow,
            job.priority,
        )
