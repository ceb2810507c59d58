"""Tests for pool._observe._stats: the snapshot of a pool's load, and the one-line summary a repr shows."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._observe._stats import GateStats, PoolStats

counts = st.integers(min_value=0, max_value=10_000)


def stats(**changes) -> PoolStats:
    base = PoolStats(
        workers=3,
        local_workers=2,
        admitted=7,
        running=4,
        waiting_for_worker=2,
        waiting_for_limits=1,
        dispatched=90,
        rejected=0,
        capacity_timeouts=0,
        grown=0,
        limits={},
    )
    return dataclasses.replace(base, **changes)


class TestPoolStats:
    def test_summary_should_show_workers_and_calls_only_when_nothing_was_refused_or_limited(self):
        """Test the plain line: workers (local), running, waiting (both kinds), dispatched."""
        assert stats().summary() == "Workers: 3 (2 local) | Calls: 4 running, 3 waiting, 90 dispatched"

    @pytest.mark.parametrize(("rejected", "timeouts"), [(5, 0), (0, 2), (5, 2)])
    def test_summary_should_show_rejections_and_timeouts_when_either_happened(self, rejected, timeouts):
        """Test that refusals and capacity timeouts show, together, as soon as there is one of either."""
        text = stats(rejected=rejected, capacity_timeouts=timeouts).summary()
        assert text.endswith(f"90 dispatched, {rejected} rejected, {timeouts} timed out")

    def test_summary_should_list_each_live_limit_in_order_when_there_are_some(self):
        """Test that each limit follows, in the order the pool gave them."""
        limits = {"queue 'b'": GateStats(running=1, waiting=0), "queue 'a'": GateStats(running=2, waiting=5)}
        assert (
            stats(limits=limits)
            .summary()
            .endswith(" | queue 'b': 1 running, 0 waiting, queue 'a': 2 running, 5 waiting")
        )

    @given(counts, counts, counts, counts, counts, counts, counts, counts)
    def test_summary_should_carry_every_count_when_given_any_numbers(
        self, workers, local, running, for_worker, for_limits, dispatched, rejected, timeouts
    ):
        """Test that the numbers in the line are the snapshot's own, with waiting the sum of both kinds."""
        text = stats(
            workers=workers,
            local_workers=local,
            running=running,
            waiting_for_worker=for_worker,
            waiting_for_limits=for_limits,
            dispatched=dispatched,
            rejected=rejected,
            capacity_timeouts=timeouts,
        ).summary()
        expected = [workers, local, running, for_worker + for_limits, dispatched]
        if rejected or timeouts:
            expected += [rejected, timeouts]
        assert [int(n) for n in re.findall(r"\d+", text)] == expected

    def test_defaults_should_be_zero_and_empty_when_not_given(self):
        """Test that the fields added later default to nothing (callers built with the first eleven)."""
        s = stats()
        assert (s.shrunk, s.provision_failures, dict(s.recycled), dict(s.worker_signals)) == (0, 0, {}, {})
        assert stats().recycled is not s.recycled  # not one shared dict

    def test_pool_stats_should_be_frozen_when_a_caller_tries_to_change_it(self):
        """Test that a snapshot is read-only, and so are gate figures."""
        with pytest.raises(dataclasses.FrozenInstanceError):
            stats().running = 0
        with pytest.raises(dataclasses.FrozenInstanceError):
            GateStats(1, 2).waiting = 0
