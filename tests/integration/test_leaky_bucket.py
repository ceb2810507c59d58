"""The leaky bucket with real workers: load concentrates on the lowest uids."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

import pool
from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from tests.integration import routines
from tests.integration.signals import Signals

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


async def test_fourth_call_should_get_no_workers_available_quickly_and_harm_no_one(one_slot_pool):
    async with Signals() as signals, one_slot_pool(3, loadbalancer=PriorityLoadBalancer()):
        long = [asyncio.ensure_future(routines.sleep(1.5, signals.address, f"long{i}")) for i in range(3)]
        for i in range(3):
            await signals.wait(f"started long{i}")
        t0 = time.perf_counter()
        with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted short"):
            await routines.short()
        assert time.perf_counter() - t0 < 0.5
        assert await asyncio.gather(*long) == [1.5, 1.5, 1.5]
