"""Tests for balancer.PriorityLoadBalancer: ascending uid order, every dispatch."""

from __future__ import annotations

import asyncio
import copy
import pickle
import uuid

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from balancer import LoadBalancerLike, PriorityLoadBalancer
from tests.unit.balancer.drive import Context, drive

uids = st.lists(st.uuids(), unique=True, max_size=12)
outcomes = st.lists(st.sampled_from(["ok", "busy", "broken", "gone", "leave:0", "leave:3"]), max_size=30)


class TestPriorityLoadBalancer:
    def test_isinstance_should_satisfy_the_protocol(self):
        """Test that it is a LoadBalancerLike (structural)."""
        assert isinstance(PriorityLoadBalancer(), LoadBalancerLike)

    @given(uids, outcomes, st.booleans())
    def test_delegate_should_offer_ascending_once_each_and_stop_at_success(self, members, script, hint):
        """Test the contract for any pool and any pattern of failures.

        Candidates come in ascending uid order, none twice; a worker that
        left (evicted, gone, or removed mid-rotation) is never offered again;
        one success ends the generator; without one, every worker still in
        the pool was offered.
        """
        context = Context(members, ordered_hint=hint)
        log = asyncio.run(
            drive(PriorityLoadBalancer(), context, lambda uid, i: script[i] if i < len(script) else "busy")
        )
        offered = [uid for uid, outcome in log if outcome != "left"]
        assert offered == sorted(offered, key=lambda u: u.int)
        assert len(set(offered)) == len(offered)
        left = set()
        for uid, outcome in log:  # a worker that left mid-rotation is never offered afterwards
            if outcome == "left":
                left.add(uid)
            else:
                assert uid not in left
        successes = [o for _, o in log if o == "ok"]
        assert len(successes) <= 1
        if successes:
            assert [o for _, o in log if o != "left"][-1] == "ok"
        else:
            assert set(context.workers) <= set(offered)

    async def test_delegate_should_start_from_the_lowest_uid_on_every_dispatch(self):
        """Test the leaky-bucket invariant: no rotation between dispatches (unlike round robin)."""
        members = [uuid.UUID(int=n) for n in (30, 10, 20)]
        context = Context(members, ordered_hint=False)
        for _ in range(5):
            log = await drive(PriorityLoadBalancer(), context, lambda uid, i: "ok")
            assert log == [(uuid.UUID(int=10), "ok")]

    async def test_delegate_should_spill_over_in_order_when_the_lowest_are_busy(self):
        """Test that a busy worker is skipped without being dropped."""
        members = [uuid.UUID(int=n) for n in (1, 2, 3)]
        context = Context(members, ordered_hint=True)
        log = await drive(PriorityLoadBalancer(), context, lambda uid, i: "busy" if uid.int < 3 else "ok")
        assert [u.int for u, _ in log] == [1, 2, 3]
        assert len(context.workers) == 3

    async def test_delegate_should_end_at_once_when_the_pool_is_empty(self):
        """Test that an empty pool yields nothing (the pool then raises NoWorkersAvailable)."""
        assert await drive(PriorityLoadBalancer(), Context([], ordered_hint=False), lambda uid, i: "ok") == []

    @pytest.mark.parametrize("hint", [False, True], ids=["without-ascending_uids", "with-ascending_uids"])
    @given(members=st.lists(st.uuids(), unique=True, min_size=1, max_size=30))
    def test_delegate_should_offer_workers_in_canonical_string_order(self, members, hint):
        """Test that random uids are offered in str(uid) order, whether or not the context has ``ascending_uids``."""
        context = Context(members, ordered_hint=hint)  # members in random (insertion) order
        log = asyncio.run(drive(PriorityLoadBalancer(), context, lambda uid, i: "busy"))  # all busy: every uid offered
        assert [uid for uid, _ in log] == sorted(members, key=str)

    def test_instance_should_be_stateless_and_interchangeable(self):
        """Test no attributes at all, equality, hashing, and pickling by reference."""
        balancer = PriorityLoadBalancer()
        with pytest.raises(AttributeError):
            balancer.index = 1
        assert not hasattr(balancer, "__dict__")
        assert balancer == PriorityLoadBalancer() and hash(balancer) == hash(PriorityLoadBalancer())
        for dumps in (pickle.dumps, cloudpickle.dumps):
            assert pickle.loads(dumps(balancer)) == balancer
        assert copy.deepcopy(balancer) == balancer
        assert b"balancer\nPriorityLoadBalancer" in pickle.dumps(balancer, protocol=0)


class TestKnownFull:
    """``context.known_full``: workers the pool knows have no room are skipped with no round trip."""

    @given(uids, st.data(), st.booleans())
    def test_priority_should_offer_in_order_every_worker_not_known_full(self, members, data, hint):
        full = data.draw(st.sets(st.sampled_from(members))) if members else set()
        context = Context(members, ordered_hint=hint, known_full=full)
        log = asyncio.run(drive(PriorityLoadBalancer(), context, lambda uid, i: "busy"))
        assert [uid for uid, _ in log] == sorted(set(members) - full, key=lambda u: u.int)

    @given(uids, st.data())
    def test_round_robin_should_skip_workers_known_full_and_offer_the_others_once(self, members, data):
        from balancer import RoundRobinLoadBalancer

        full = data.draw(st.sets(st.sampled_from(members))) if members else set()
        context = Context(members, ordered_hint=True, known_full=full)
        balancer = RoundRobinLoadBalancer()
        for _ in range(3):
            log = asyncio.run(drive(balancer, context, lambda uid, i: "busy"))
            assert sorted(uid for uid, _ in log) == sorted(set(members) - full)

    async def test_a_pool_without_the_hint_should_get_every_worker_offered(self):
        members = [uuid.UUID(int=n) for n in (1, 2, 3)]
        log = await drive(PriorityLoadBalancer(), Context(members, ordered_hint=False), lambda uid, i: "busy")
        assert [uid for uid, _ in log] == members

    async def test_the_first_worker_with_room_should_be_found_cheaply_at_a_thousand_workers(self):
        """Not timed (bench/ is): a thousand skips cost no offer and no await."""
        members = [uuid.UUID(int=n) for n in range(1, 1001)]
        context = Context(members, ordered_hint=True, known_full=members[:999])
        log = await drive(PriorityLoadBalancer(), context, lambda uid, i: "ok")
        assert log == [(members[999], "ok")]
