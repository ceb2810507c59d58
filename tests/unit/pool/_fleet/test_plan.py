"""Tests for pool._fleet._plan: how many workers to ask a provisioner for, one rule at a time.

The random-walk model (`PlanMachine`, the bounds under any sequence) stays in test_provision.py, where the
module's docstring points; these tests pin each rule on its own, at its edges.
"""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from pool._fleet._plan import BACKOFF_FIRST_S, BACKOFF_MAX_S, MAX_OUTSTANDING, ProvisionPlan, backoff_s

UIDS = [uuid.UUID(int=i) for i in range(1, 20)]


class TestProvisionPlan:
    def test_wanted_should_stop_at_max_outstanding_when_far_below_max_workers(self):
        """Test that only ``max_outstanding`` requests are in flight at once, however many workers are missing."""
        plan = ProvisionPlan(max_workers=100, provision_timeout=60.0)
        asked = 0
        while plan.wanted(0.0, members=0):
            plan.requested(UIDS[asked], 0.0)
            asked += 1
        assert asked == MAX_OUTSTANDING
        assert plan.joined(UIDS[0])
        assert plan.wanted(0.0, members=1) == 1  # one joined: a place in flight again

    def test_wanted_should_be_zero_when_members_alone_reach_max_workers(self):
        """Test that a pool already at its size asks for nothing."""
        plan = ProvisionPlan(max_workers=2, provision_timeout=60.0)
        assert plan.wanted(0.0, members=2) == 0
        assert plan.wanted(0.0, members=3) == 0
        assert plan.wanted(0.0, members=1) == 1

    def test_joined_should_be_false_and_keep_failures_when_the_worker_was_not_asked_for(self):
        """Test that a stranger joining (another pool's, a spawned one) neither counts nor resets the back-off."""
        plan = ProvisionPlan(max_workers=5, provision_timeout=60.0)
        plan.requested(UIDS[0], 0.0)
        plan.failed(UIDS[0], 0.0)
        assert plan.joined(UIDS[1]) is False
        assert plan.failures == 1
        assert plan.joined(UIDS[0]) is False  # failed: it no longer counts

    def test_expired_should_give_up_a_request_at_its_deadline_exactly(self):
        """Test the boundary: a request counts until ``now + provision_timeout``, then is returned once."""
        plan = ProvisionPlan(max_workers=5, provision_timeout=2.0)
        plan.requested(UIDS[0], 1.0)
        plan.requested(UIDS[1], 2.0)
        assert plan.expired(2.999) == []
        assert plan.expired(3.0) == [UIDS[0]]
        assert plan.expired(3.0) == []
        assert list(plan.outstanding) == [UIDS[1]]

    def test_failed_should_double_the_back_off_on_each_failure_after_the_last_ended(self):
        """Test that failures in a row, each after the previous pause, pause 1, 2, 4 ... seconds."""
        plan = ProvisionPlan(max_workers=50, provision_timeout=60.0, max_outstanding=50)
        now = 0.0
        pauses = []
        for uid in UIDS[:5]:
            plan.requested(uid, now)
            assert plan.failed(uid, now) is True
            pauses.append(plan.resume_at - now)
            now = plan.resume_at
        assert pauses == [1.0, 2.0, 4.0, 8.0, 16.0]
        assert plan.failures == 5

    def test_failed_should_not_extend_a_back_off_that_runs(self):
        """Test that a second failure during a pause neither counts nor moves the end of the pause."""
        plan = ProvisionPlan(max_workers=5, provision_timeout=60.0)
        plan.requested(UIDS[0], 0.0)
        plan.requested(UIDS[1], 0.0)
        plan.failed(UIDS[0], 0.0)
        resume = plan.resume_at
        assert plan.failed(UIDS[1], resume - 0.001) is False
        assert (plan.resume_at, plan.failures) == (resume, 1)
        assert plan.outstanding == {}
        assert plan.wanted(resume - 0.001, 0) == 0
        assert plan.wanted(resume, 0) == 1


class TestBackoff:
    def test_backoff_should_start_at_the_first_pause_and_cap_at_the_longest(self):
        """Test the documented sequence 1, 2, 4 ... 30 seconds."""
        assert [backoff_s(n) for n in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
        assert backoff_s(0) == BACKOFF_FIRST_S  # (no failure yet: the first pause)

    @given(st.integers(1, 200))
    def test_backoff_should_double_until_the_cap(self, failures):
        """Test that each pause is twice the previous one, or the cap."""
        assert backoff_s(failures + 1) == min(BACKOFF_MAX_S, 2 * backoff_s(failures))
