"""Tests for what one scheduler holds (`pool._jobs._holdings`): due order, put back, drop, end."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool._jobs._attempt import Attempt
from pool._jobs._codec import RetryPolicy
from pool._jobs._holdings import Holdings
from pool._jobs._store import JobRecord


def _attempt(job_id: str, priority: int = 0, next_at: float = 0.0) -> Attempt:
    record = JobRecord(
        job_id, "r", "pending", 0, 1, 0.0, None, None, 60.0, next_at, "me", "", b"", None, False, "", "", "", priority
    )
    return Attempt(record, None, RetryPolicy())  # type: ignore[arg-type]  # (no task needed here)


class TestHoldings:
    @given(st.lists(st.tuples(st.integers(-3, 3), st.floats(0, 100)), max_size=30))
    def test_adopt_should_keep_the_waiting_jobs_in_the_stores_lease_order(self, jobs):
        """Test that jobs adopted in any order wait by priority, then due time (as the store leases them)."""
        held = Holdings(lambda job_id, final: None)
        for i, (priority, next_at) in enumerate(jobs):
            held.adopt(_attempt(f"j{i}", priority, next_at))
        orders = [a.job.lease_order for a in held.waiting]
        assert orders == sorted(orders)
        assert held.ids == {f"j{i}" for i in range(len(jobs))}

    def test_put_back_should_drop_a_job_cancelled_while_it_was_placed(self):
        """Test that a placement put back after a cancel does not wait again: its waiters are told."""
        told = []
        held = Holdings(lambda job_id, final: told.append((job_id, final)))
        attempt = _attempt("j")
        held.adopt(attempt)
        held.waiting.remove(attempt)
        held.placing.add(attempt)
        held.cancelled.add("j")
        held.put_back(attempt)
        assert (held.waiting, held.ids, held.cancelled, told) == ([], set(), set(), [("j", None)])

    def test_end_should_forget_the_job_and_report_its_final_record(self):
        """Test that an attempt's end leaves nothing held and hands its final record to the waiters."""
        told = []
        held = Holdings(lambda job_id, final: told.append((job_id, final)))
        attempt = _attempt("j")
        held.adopt(attempt)
        held.waiting.remove(attempt)
        held.running["j"] = attempt
        held.end("j", attempt.job)
        assert (held.running, held.ids, told) == ({}, set(), [("j", attempt.job)])
