"""Tests for pool._jobs._lease: when a held job may start, and the epoch each job came in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool._jobs._lease import OwnLease

TTL = 3.0


def renewed_at(sent: float) -> OwnLease:
    lease = OwnLease(TTL)
    assert not lease.renewed(sent, sent + 0.01)  # the first renewal: nothing held before it
    return lease


def test_a_job_should_start_only_while_a_renewal_period_of_the_lease_is_left():
    lease = OwnLease(TTL)
    assert not lease.holds(0.0)  # never renewed: nothing may start
    lease = renewed_at(100.0)
    assert lease.until == 103.0
    assert lease.holds(100.0) and lease.holds(101.99)
    assert not lease.holds(102.0) and not lease.holds(104.0)


def test_renewals_on_time_should_keep_the_epoch():
    lease = renewed_at(100.0)
    for sent in (101.0, 102.0, 102.9):
        assert not lease.renewed(sent, sent + 0.05)
    assert lease.epoch == 0 and lease.until == 105.9


def test_a_renewal_answered_once_no_job_could_start_should_start_a_new_epoch():
    lease = renewed_at(100.0)
    assert not lease.renewed(101.0, 101.99)  # answered while a job could still start (before 103 - 1)
    assert lease.epoch == 0 and lease.until == 104.0
    assert lease.renewed(102.0, 103.0)  # answered at 104 - 1: starts had stopped, another clock may be ahead
    assert lease.epoch == 1 and lease.until == 105.0
    assert lease.renewed(110.0, 110.1)  # the store was away past the lease's end
    assert lease.epoch == 2 and lease.holds(110.1)


def test_a_kept_submission_should_arrive_under_the_oldest_epoch_on_its_way_in():
    lease = renewed_at(100.0)
    assert lease.arrived() == 0 and lease.in_flight == 0  # none on its way in: the current epoch
    lease.claim()
    lease.renewed(110.0, 110.1)
    lease.claim()
    assert lease.in_flight == 2
    assert lease.arrived() == 0  # which one arrived is not known: the oldest
    assert lease.arrived() == 0 and lease.in_flight == 0  # (the first may have been the newer one)
    lease.claim()
    assert lease.arrived() == 1  # all of the old epoch arrived: the current one


@given(st.lists(st.sampled_from(["claim", "lapse", "arrive"]), max_size=60), st.randoms(use_true_random=False))
def test_no_submission_should_arrive_under_an_epoch_newer_than_its_own(steps, rng):
    """Whichever submission on its way in arrives, the epoch given is never newer than the one it began in."""
    lease = renewed_at(0.0)
    now = 0.0
    on_their_way: list[int] = []  # the epoch each began in
    for step in steps:
        if step == "claim":
            lease.claim()
            on_their_way.append(lease.epoch)
        elif step == "lapse":
            now += 10.0
            assert lease.renewed(now, now + 0.01)
        elif on_their_way:
            began = on_their_way.pop(rng.randrange(len(on_their_way)))
            assert lease.arrived() <= began
        assert lease.in_flight == len(on_their_way)
