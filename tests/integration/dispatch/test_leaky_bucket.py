"""The leaky bucket with real workers: load concentrates on the lowest uids."""

from __future__ import annotations

import asyncio
import collections
import pathlib

import pytest

import pool
from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def drive_two_callers(tasks_each: int = 40) -> collections.Counter[int]:
    ran_on: collections.Counter[int] = collections.Counter()

    async def caller() -> None:
        for _ in range(tasks_each):
            ran_on[await routines.short(0.01)] += 1

    await asyncio.gather(caller(), caller())
    return ran_on


async def test_priority_should_keep_two_callers_on_the_two_lowest_uid_workers(one_slot_pool):
    async with one_slot_pool(4, loadbalancer=PriorityLoadBalancer()) as p:
        by_uid = sorted(p.workers.values(), key=lambda m: m.uid.int)
        ran_on = await drive_two_callers()
    assert sum(ran_on.values()) == 80  # no call failed
    assert set(ran_on) <= {by_uid[0].pid, by_uid[1].pid}
    assert ran_on[by_uid[0].pid] >= 40  # the lowest is never passed over while it has room


async def test_round_robin_should_spread_the_same_load_over_all_workers(one_slot_pool):
    async with one_slot_pool(4, loadbalancer=RoundRobinLoadBalancer()) as p:
        pids = {m.pid for m in p.workers.values()}
        ran_on = await drive_two_callers()
    assert sum(ran_on.values()) == 80
    assert set(ran_on) == pids


async def test_fourth_call_should_get_no_workers_available_quickly_and_harm_no_one(one_slot_pool, tmp_path):
    release = str(tmp_path / "release")
    async with Signals() as signals, one_slot_pool(3, loadbalancer=PriorityLoadBalancer()):
        long = [asyncio.ensure_future(routines.hold_until(release, signals.address, f"long{i}")) for i in range(3)]
        for i in range(3):
            await signals.wait(f"start long{i}")
        # "Quickly" is an order of events: the three hold their workers until the test releases them, so
        # a pool that waits for room instead of refusing never ends this call (HANG_S); each worker's own
        # Reject (RESOURCE_EXHAUSTED), not ACCEPT_TIMEOUT_S on a silent one, is what turned it away.
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted short") as info:
            await asyncio.wait_for(routines.short(), HANG_S)
        assert isinstance(info.value.__cause__, pool.WorkerRejected)
        assert info.value.__cause__.code == "RESOURCE_EXHAUSTED"
        assert not any(call.done() for call in long)  # refused while all three still held their workers
        pathlib.Path(release).touch()
        async with asyncio.timeout(HANG_S):
            assert await asyncio.gather(*long) == ["long0", "long1", "long2"]
