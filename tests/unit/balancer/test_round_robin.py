"""Tests for balancer.RoundRobinLoadBalancer: each dispatch starts one worker further."""

from __future__ import annotations

import asyncio
import collections
import pickle
import uuid

from hypothesis import given
from hypothesis import strategies as st

from balancer import LoadBalancerLike, RoundRobinLoadBalancer
from tests.unit.balancer.drive import Context, drive


class TestRoundRobinLoadBalancer:
    def test_isinstance_should_satisfy_the_protocol(self):
        """Test that it is a LoadBalancerLike (structural)."""
        assert isinstance(RoundRobinLoadBalancer(), LoadBalancerLike)

    @given(st.lists(st.uuids(), unique=True, min_size=1, max_size=8), st.integers(1, 5))
    def test_delegate_should_share_dispatches_evenly(self, members, rounds):
        """Test fairness: over rounds x n successful dispatches each worker gets exactly `rounds`."""
        context = Context(members, ordered_hint=False)
        balancer = RoundRobinLoadBalancer()
        picks = collections.Counter()
        for _ in range(rounds * len(members)):
            log = asyncio.run(drive(balancer, context, lambda uid, i: "ok"))
            picks[log[-1][0]] += 1
        assert set(picks.values()) == {rounds}

    @given(st.lists(st.uuids(), unique=True, max_size=8))
    def test_delegate_should_offer_each_worker_once_when_all_are_busy(self, members):
        """Test that one dispatch ends after a full turn."""
        log = asyncio.run(drive(RoundRobinLoadBalancer(), Context(members, ordered_hint=True), lambda uid, i: "busy"))
        assert sorted(uid for uid, _ in log) == sorted(members)

    async def test_delegate_should_skip_workers_that_left(self):
        """Test that an evicted worker is not offered again in the same turn."""
        members = [uuid.UUID(int=n) for n in (1, 2, 3)]
        context = Context(members, ordered_hint=False)
        log = await drive(RoundRobinLoadBalancer(), context, lambda uid, i: "broken")
        assert len(log) == 3 and not context.workers

    async def test_pickle_should_drop_the_cursors(self):
        """Test that a copy starts afresh at the lowest uid while the original keeps its cursor."""
        members = [uuid.UUID(int=n) for n in (1, 2, 3)]
        context = Context(members, ordered_hint=True)
        balancer = RoundRobinLoadBalancer()
        assert (await drive(balancer, context, lambda uid, i: "ok"))[-1][0].int == 1  # the cursor moves on
        restored = pickle.loads(pickle.dumps(balancer))
        assert len(balancer._cursors) == 1 and len(restored._cursors) == 0
        assert (await drive(restored, context, lambda uid, i: "ok"))[-1][0].int == 1  # afresh
        assert (await drive(balancer, context, lambda uid, i: "ok"))[-1][0].int == 2  # the original goes on
