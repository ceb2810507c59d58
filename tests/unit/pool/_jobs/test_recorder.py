"""Tests for pool._jobs._recorder: what an accepted attempt leaves in a real SQLite store, running then its outcome.

The call is a real `OutgoingCall` on a stand-in stream: the test delivers the worker's frames and sees the steps
(a cancel) the recorder sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

import pytest

import pool
from pool._call._task import CallRecord
from pool._jobs._attempt import Attempt, raised
from pool._jobs._codec import RetryPolicy, open_outcome
from pool._jobs._recorder import Recorder
from pool._jobs._store import NewJob
from pool._jobs._stores._sqlite import SQLiteStore
from pool._transport import _wire
from pool._transport._outgoing import OutgoingCall
from pool._transport._proto import leakypool_pb2 as pb
from tests.integration.support.helpers import eventually
from tests.sealing import SEAL


class Stream:
    """The session an `OutgoingCall` reports to: records the steps sent; a cancel may be confirmed at once."""

    label = "worker w"
    written = 0

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.call: OutgoingCall | None = None
        self.confirm_cancel = True

    def step(self, call_id: int, kind: int, value: bytes = b"") -> None:
        self.steps.append(kind)
        if kind == pb.Step.CANCEL and self.confirm_cancel and self.call is not None:
            frame = pb.Frame(outcome=pb.Outcome(kind=pb.Outcome.CANCELLED))
            asyncio.get_running_loop().call_soon(self.call.deliver, frame)  # the worker confirms it stopped

    def forget(self, call_id: int) -> None:
        pass


def opened_call() -> tuple[OutgoingCall, Stream]:
    stream = Stream()
    stream.call = OutgoingCall(stream, 1, "app.f")
    return stream.call, stream


def outcome_frame(outcome: pb.Outcome) -> pb.Frame:
    return pb.Frame(outcome=outcome)


def returned(value: object) -> pb.Outcome:
    return pb.Outcome(kind=pb.Outcome.RETURN, value=_wire.dumps(value, what="x"))


class FlakyMark(SQLiteStore):
    """A store whose first mark_running commits, then loses the connection before answering."""

    lost = False

    async def mark_running(self, job_id: str, owner: str, now: float) -> bool:
        done = await super().mark_running(job_id, owner, now)
        if not self.lost:
            self.lost = True
            raise pool.StoreError("the connection broke after the commit")
        return done


@contextlib.asynccontextmanager
async def leased(
    tmp_path, max_attempts: int = 1, store_type: type[SQLiteStore] = SQLiteStore
) -> AsyncIterator[tuple[Recorder, Attempt]]:
    """A store holding one job leased by owner "me", and a recorder for "me" with the attempt to follow."""
    store = store_type(str(tmp_path / "jobs.db"))
    await store.open()
    try:
        now = time.time()
        await store.heartbeat("me", now, 600)
        await store.submit(NewJob("j1", "app.f", b"p", now, now + 60, max_attempts), owner="me")
        record = await store.get("j1")
        task = CallRecord("app.f", False, b"d", b"", b"")
        yield Recorder(store, "me", SEAL), Attempt(record, task, RetryPolicy(retry_backoff=30.0))
    finally:
        await store.close()


async def state_is(store: SQLiteStore, state: str) -> bool:
    return (await store.get("j1")).state == state


class TestFollow:
    async def test_follow_should_record_an_attempt_that_ends_at_once_in_one_write(self, tmp_path):
        """Test the quick path: pending straight to succeeded, with the attempt and its start counted."""
        async with leased(tmp_path) as (recorder, attempt):
            call, _ = opened_call()
            call.deliver(outcome_frame(returned(3)))
            final = await asyncio.wait_for(recorder.follow(attempt, call), 5)
            stored = await recorder.store.get("j1")
            assert (stored.state, stored.attempts, stored.started_at) == ("succeeded", 1, attempt.started)
            assert pb.Outcome.FromString(open_outcome("j1", stored.outcome, SEAL)) == returned(3)
            assert (final.state, final.attempts, final.started_at, final.outcome) == (
                "succeeded",
                1,
                attempt.started,
                stored.outcome,
            )

    async def test_follow_should_mark_a_longer_attempt_running_before_its_outcome(self, tmp_path):
        """Test that a job still going after a moment shows as running, then ends with its outcome."""
        async with leased(tmp_path) as (recorder, attempt):
            call, _ = opened_call()
            following = asyncio.ensure_future(recorder.follow(attempt, call))
            await eventually(lambda: state_is(recorder.store, "running"))
            call.deliver(outcome_frame(raised(KeyError("k"), "app.f")))
            final = await asyncio.wait_for(following, 5)
            assert (final.state, final.error, final.attempts) == ("failed", "KeyError: 'k'", 1)
            assert (await recorder.store.get("j1")).state == "failed"

    async def test_follow_should_cancel_the_call_when_the_job_is_no_longer_ours(self, tmp_path):
        """Test that a job cancelled before it could be marked running has its call cancelled, and nothing recorded."""
        async with leased(tmp_path) as (recorder, attempt):
            await recorder.store.cancel("j1", time.time())
            call, stream = opened_call()
            stream.confirm_cancel = False
            assert await asyncio.wait_for(recorder.follow(attempt, call), 5) is None
            assert pb.Step.CANCEL in stream.steps and call.finished
            assert (await recorder.store.get("j1")).state == "cancelled"

    async def test_follow_should_retry_a_lost_worker_from_running_while_attempts_remain(self, tmp_path):
        """Test that a quick WorkerBroken is marked running first, then given back to the store for a later try."""
        async with leased(tmp_path, max_attempts=2) as (recorder, attempt):
            call, _ = opened_call()
            call.deliver(pool.WorkerBroken("the worker died"))
            before = time.time()
            assert await asyncio.wait_for(recorder.follow(attempt, call), 5) is None
            stored = await recorder.store.get("j1")
            assert (stored.state, stored.owner, stored.attempts) == ("pending", "", 1)
            assert stored.next_at > before + 10  # retry_backoff 30 s, jittered by at most half
            assert "WorkerBroken: the worker died" in stored.error

    async def test_follow_should_fail_a_lost_worker_when_no_attempt_remains(self, tmp_path):
        """Test that WorkerBroken on the last attempt fails the job with that error."""
        async with leased(tmp_path, max_attempts=1) as (recorder, attempt):
            call, _ = opened_call()
            call.deliver(pool.WorkerBroken("the worker died"))
            final = await asyncio.wait_for(recorder.follow(attempt, call), 5)
            assert (final.state, final.error) == ("failed", "WorkerBroken: the worker died")

    async def test_follow_should_finish_as_cancelled_when_cancelled_by_request(self, tmp_path):
        """Test a cancel asked for by a user: the call is aborted (confirmed by the worker) and the job cancelled."""
        async with leased(tmp_path) as (recorder, attempt):
            call, stream = opened_call()
            following = asyncio.ensure_future(recorder.follow(attempt, call))
            await eventually(lambda: state_is(recorder.store, "running"))
            attempt.cancel_requested = True
            following.cancel()
            final = await asyncio.wait_for(following, 5)
            assert (final.state, final.error) == ("cancelled", "cancelled by request")
            assert stream.steps == [pb.Step.CANCEL] and call.finished
            assert (await recorder.store.get("j1")).state == "cancelled"

    async def test_follow_should_propagate_cancellation_when_the_pool_is_closing(self, tmp_path):
        """Test that a cancel nobody asked for (the pool closing) aborts the call and records nothing."""
        async with leased(tmp_path) as (recorder, attempt):
            call, stream = opened_call()
            following = asyncio.ensure_future(recorder.follow(attempt, call))
            await eventually(lambda: state_is(recorder.store, "running"))
            following.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(following, 5)
            assert stream.steps == [pb.Step.CANCEL]
            assert (await recorder.store.get("j1")).state == "running"  # release_owner re-queues it

    async def test_follow_should_count_a_mark_that_committed_before_the_connection_broke(self, tmp_path):
        """Test that a mark_running whose answer was lost is checked again, and found done, not repeated."""
        async with leased(tmp_path, store_type=FlakyMark) as (recorder, attempt):
            call, _ = opened_call()
            following = asyncio.ensure_future(recorder.follow(attempt, call))
            await eventually(lambda: recorder.store.lost)
            call.deliver(outcome_frame(returned("ok")))
            final = await asyncio.wait_for(following, 5)
            assert (final.state, final.attempts) == ("succeeded", 1)
            assert (await recorder.store.get("j1")).attempts == 1

    async def test_follow_should_log_and_drop_an_outcome_when_the_job_is_no_longer_ours(self, tmp_path, caplog):
        """Test that an outcome the store refuses (the lease was lost meanwhile) is logged, not written."""
        async with leased(tmp_path) as (recorder, attempt):
            call, _ = opened_call()
            following = asyncio.ensure_future(recorder.follow(attempt, call))
            await eventually(lambda: state_is(recorder.store, "running"))
            await recorder.store.release_owner("me", time.time())  # as if another process revived it
            call.deliver(outcome_frame(returned(1)))
            with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
                assert await asyncio.wait_for(following, 5) is None
            assert "job j1: its outcome (succeeded) was not recorded: the job is no longer ours" in caplog.text
            assert (await recorder.store.get("j1")).state == "pending"


class TestFailPending:
    async def test_fail_pending_should_fail_a_held_job_that_never_ran(self, tmp_path):
        """Test that a job with no worker in time fails with the error, as text and as its outcome."""
        async with leased(tmp_path) as (recorder, attempt):
            await recorder.fail_pending(attempt.job, pool.CapacityTimeout("app.f() found no worker within 60s"))
            stored = await recorder.store.get("j1")
            assert (stored.state, stored.error) == ("failed", "CapacityTimeout: app.f() found no worker within 60s")
            assert pb.Outcome.FromString(open_outcome("j1", stored.outcome, SEAL)).kind == pb.Outcome.RAISE
