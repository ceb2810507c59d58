"""Admission on real workers: a burst waits in FIFO order, true overload is refused fast."""

from __future__ import annotations

import asyncio
import collections
import pathlib
import time
from collections.abc import Iterator

import pytest

import balancer
import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S, eventually, until_members
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_queued_calls_should_start_in_fifo_order(one_slot_pool, release):
    async with Signals() as signals, one_slot_pool(queue_depth=10) as p:
        # The blocker holds the worker until every call is queued: a slow machine cannot let it end
        # first (and the calls start in arrival order instead of the queue's).
        blocker = asyncio.ensure_future(routines.hold_until(release, signals.address, "blocker"))
        await signals.wait("start blocker")
        calls = []
        for i in range(6):
            calls.append(asyncio.ensure_future(routines.span(0.01, i, signals.address)))
            await asyncio.sleep(0)  # make the arrival order unambiguous
        await eventually(lambda: p.stats().waiting_for_worker == 6)
        pathlib.Path(release).touch()
        await asyncio.wait_for(blocker, HANG_S)
        results = await asyncio.gather(*calls)
    assert [r[0] for r in sorted(results, key=lambda r: r[2])] == list(range(6))


DEADLINE_S = 0.5
"""The pools' ``dispatch_deadline`` / ``admission_timeout`` in the tests below that wait for one."""

EARLY = 0.9
"""A timer may fire a hair before its time (the loop's clock resolution): a lower bound allows that much."""


@pytest.fixture
def release(tmp_path) -> Iterator[str]:
    """A path that lets every `routines.hold_until` of this test go once it exists (at the test's end at the latest)."""
    path = tmp_path / "release"
    yield str(path)
    path.touch()


# The tests below hold their blockers until the test releases them, so "refused while the blocker
# still runs" is an order of events: a deadline, timeout or ceiling that is not enforced leaves the
# call waiting for room that never comes (HANG_S ends it as a failure). How long a refusal took is
# only bounded from below (by the setting that is enforced), which no slow machine can break.


async def test_queued_call_should_fail_with_capacity_timeout_after_the_deadline(one_slot_pool, release):
    async with Signals() as signals, one_slot_pool(queue_depth=5, dispatch_deadline=DEADLINE_S) as p:
        blocker = asyncio.ensure_future(routines.hold_until(release, signals.address, "blocker"))
        await signals.wait("start blocker")
        t0 = time.monotonic()
        with pytest.raises(balancer.NoWorkersAvailable) as info:  # what generic handlers catch
            await asyncio.wait_for(routines.add(1, 2), HANG_S)
        waited = time.monotonic() - t0
        assert isinstance(info.value, pool.CapacityTimeout)
        assert f"waited {DEADLINE_S:g}s (dispatch_deadline)" in str(info.value)
        assert waited >= DEADLINE_S * EARLY  # not before its deadline
        assert not blocker.done()  # ...and not by getting the worker: the blocker still holds it
        assert p.stats().capacity_timeouts == 1
        pathlib.Path(release).touch()
        assert await asyncio.wait_for(blocker, HANG_S) == "blocker"


async def test_cancelled_waiter_should_leave_at_once_and_free_its_place(one_slot_pool, release):
    async with Signals() as signals, one_slot_pool(queue_depth=1, admission_timeout=0) as p:
        blocker = asyncio.ensure_future(routines.hold_until(release, signals.address, "blocker"))
        await signals.wait("start blocker")
        queued = asyncio.ensure_future(routines.span(0, "queued", signals.address))
        await eventually(lambda: p.stats().waiting_for_worker == 1)
        with pytest.raises(pool.AdmissionRejected, match="the queue is full"):
            await routines.add(1, 2)  # the one place is taken
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert p.stats().waiting_for_worker == 0
        added = asyncio.ensure_future(routines.add(1, 2))  # the freed place is usable: it queues there...
        await eventually(lambda: added.done() or p.stats().waiting_for_worker == 1)
        pathlib.Path(release).touch()
        assert await asyncio.wait_for(added, HANG_S) == 3  # ...and runs once the blocker lets go
        await blocker
        assert signals.count("start queued") == 0  # the cancelled call never ran


async def test_full_queue_should_admit_a_call_whose_place_frees_within_the_admission_timeout(one_slot_pool):
    async with Signals() as signals, one_slot_pool(queue_depth=1, admission_timeout=5) as p:
        blocker = asyncio.ensure_future(routines.span(0.3, "blocker", signals.address))
        await signals.wait("start blocker")
        first = asyncio.ensure_future(routines.span(0.01, "first"))
        second = asyncio.ensure_future(routines.span(0.01, "second"))  # waits for first's place
        assert [r[0] for r in await asyncio.gather(blocker, first, second)] == ["blocker", "first", "second"]
        assert p.stats().rejected == 0


async def test_full_queue_should_reject_after_the_admission_timeout(one_slot_pool, release):
    async with Signals() as signals, one_slot_pool(queue_depth=1, admission_timeout=DEADLINE_S) as p:
        blocker = asyncio.ensure_future(routines.hold_until(release, signals.address, "blocker"))
        await signals.wait("start blocker")
        queued = asyncio.ensure_future(routines.span(0.01, "queued"))
        await eventually(lambda: p.stats().waiting_for_worker == 1)
        t0 = time.monotonic()
        with pytest.raises(pool.AdmissionRejected, match="stayed full") as info:
            await asyncio.wait_for(routines.add(1, 2), HANG_S)
        assert time.monotonic() - t0 >= DEADLINE_S * EARLY  # it waited its admission_timeout for a place...
        assert not blocker.done() and not queued.done()  # ...that never freed: the queue was still full
        assert info.value.retry_after > 0
        pathlib.Path(release).touch()
        await asyncio.wait_for(asyncio.gather(blocker, queued), HANG_S)


async def test_ceiling_should_refuse_at_once_with_a_retry_after(one_slot_pool, release):
    # "At once" is tied to the mechanism: the queue here would let a call wait 2 x HANG_S for a place
    # (admission_timeout), so a ceiling that waited like a full queue instead of refusing runs into HANG_S.
    async with (
        Signals() as signals,
        one_slot_pool(queue_depth=10, max_pending=3, admission_timeout=2 * HANG_S) as p,
    ):
        calls = [asyncio.ensure_future(routines.hold_until(release, signals.address, str(i))) for i in range(3)]
        await signals.wait("start 0")
        await eventually(lambda: p.stats().waiting_for_worker == 2)  # 1 running + 2 waiting: the ceiling
        with pytest.raises(pool.AdmissionRejected, match=r"max_pending=3") as info:
            await asyncio.wait_for(routines.add(1, 2), HANG_S)
        assert not any(call.done() for call in calls)  # refused while the three were all still pending
        assert 0.05 <= info.value.retry_after <= 60
        assert p.stats().rejected == 1
        pathlib.Path(release).touch()
        await asyncio.wait_for(asyncio.gather(*calls), HANG_S)
        assert await routines.add(1, 2) == 3  # room again


async def test_burst_should_neither_lose_nor_repeat_a_call():
    async with (
        Signals() as signals,
        pool.WorkerPool(spawn=2, backpressure=TaskCountBackpressure(2), queue_depth=200) as p,
    ):
        results = await asyncio.gather(*(routines.span(0.01, i, signals.address) for i in range(120)))
        assert sorted(r[0] for r in results) == list(range(120))
        starts = collections.Counter(line for line in signals.lines if line.startswith("start"))
        assert len(starts) == 120 and set(starts.values()) == {1}
        assert routines.max_overlap(results) <= 4
        s = p.stats()
        assert (s.admitted, s.running, s.waiting_for_worker, s.dispatched) == (0, 0, 0, 120)


async def test_pool_should_grow_under_a_burst_and_shrink_back_after_it(one_slot_pool):
    async with one_slot_pool(max_workers=3, idle_timeout=0.5, loadbalancer=PriorityLoadBalancer(), queue_depth=50) as p:
        (base,) = p.workers
        results = await asyncio.gather(*(routines.span(0.5, i) for i in range(16)))
        assert len({r[1] for r in results}) == 3  # the burst ran on three workers
        assert p.stats().grown == 2
        await until_members(p, lambda p: len(p.workers) == 1, timeout=30)  # the grown ones idled out
        assert list(p.workers) == [base] and p.stats().shrunk == 2
        assert await routines.add(1, 1) == 2


async def test_pool_should_grow_even_without_a_queue(one_slot_pool):
    async with Signals() as signals, one_slot_pool(max_workers=2, idle_timeout=30) as p:
        held = asyncio.ensure_future(routines.span(30, "held", signals.address))
        await signals.wait("start held")
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.add(1, 2)  # no queue: this one fails, and the pool grows for the next
        await p.wait_for_workers(2, timeout=30)
        assert await routines.add(1, 2) == 3
        held.cancel()
        await asyncio.gather(held, return_exceptions=True)
