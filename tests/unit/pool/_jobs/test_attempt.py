"""Tests for pool._jobs._attempt.decide: what an attempt's outcome leads to (no I/O)."""

from __future__ import annotations

import pickle

from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._call._task import CallRecord
from pool._jobs._attempt import MAX_BACKOFF_S, RESULT_LIMIT_BYTES, Attempt, decide, expired, raised
from pool._jobs._codec import RetryPolicy
from pool._jobs._store import JobRecord
from pool._transport._proto import leakypool_pb2 as pb


def leased(attempts: int = 0, max_attempts: int = 3) -> JobRecord:
    return JobRecord(
        "j", "f", "running", attempts, max_attempts, 0.0, None, None, 9.0, 0.0, "me", "", b"", None, False, "", "", ""
    )


def returned(value: object) -> pb.Outcome:
    return pb.Outcome(kind=pb.Outcome.RETURN, value=pickle.dumps(value))


class TestDecide:
    def test_decide_should_succeed_on_a_value_and_fail_one_over_the_size_limit(self):
        """Test the result size limit."""
        assert decide(leased(), RetryPolicy(), returned(3)).state == "succeeded"
        big = pb.Outcome(kind=pb.Outcome.RETURN, value=b"x" * (RESULT_LIMIT_BYTES + 1))
        verdict = decide(leased(), RetryPolicy(), big)
        assert verdict.state == "failed" and "over the" in verdict.error and verdict.retry_in is None

    @given(attempts=st.integers(0, 5), max_attempts=st.integers(1, 6), backoff=st.floats(0, 100))
    def test_decide_should_retry_a_lost_worker_only_while_attempts_remain(self, attempts, max_attempts, backoff):
        """Test at-least-once on WorkerBroken, bounded by max_attempts, with a jittered exponential delay."""
        verdict = decide(leased(attempts, max_attempts), RetryPolicy(backoff), raised(pool.WorkerBroken("gone"), "f"))
        if attempts + 1 < max_attempts:
            assert verdict.state == "pending" and verdict.retry_in is not None
            base = min(MAX_BACKOFF_S, backoff * 2**attempts)
            assert 0.5 * base <= verdict.retry_in <= 1.5 * base
        else:
            assert verdict.state == "failed" and verdict.retry_in is None

    def test_decide_should_retry_a_routines_error_only_when_retry_on_lists_its_type(self):
        """Test retry_on: a listed type (or subclass) retries, anything else fails at once."""
        error = raised(KeyError("k"), "f")
        assert decide(leased(), RetryPolicy(0.1, (LookupError,)), error).state == "pending"
        failed = decide(leased(), RetryPolicy(0.1, (ValueError,)), error)
        assert failed.state == "failed" and failed.error.startswith("KeyError")


def test_expired_should_split_off_the_jobs_past_their_dispatch_deadline_in_order():
    """Test `expired`: jobs within their deadline stay in order; the others get a CapacityTimeout naming the wait."""

    def waiting(job_id: str, deadline: float) -> Attempt:
        record = JobRecord(
            job_id, "f", "pending", 0, 1, 0.0, None, None, deadline, 0.0, "me", "", b"", None, False, "", "", ""
        )
        return Attempt(record, CallRecord("app.f", False, b"d", b"", b""), RetryPolicy())

    keep, gone = expired([waiting("a", 5.0), waiting("b", 2.0), waiting("c", 9.0), waiting("d", 3.0)], 3.0)
    assert [a.job.id for a in keep] == ["a", "c"] and [a.job.id for a, _ in gone] == ["b", "d"]
    assert all(isinstance(error, pool.CapacityTimeout) for _, error in gone)
    assert str(gone[0][1]) == "app.f() found no worker within 2s (dispatch_deadline)"
