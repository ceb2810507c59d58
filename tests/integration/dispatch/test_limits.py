"""Queues, concurrency keys, workflows and fan-out, with real workers."""

from __future__ import annotations

import asyncio
import collections

import pytest

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines
from tests.integration.routines.common import max_overlap
from tests.integration.support.helpers import HANG_S, eventually
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


def roomy_pool(**kwargs) -> pool.WorkerPool:
    """Two workers with no task cap: only the limits under test restrict concurrency."""
    return pool.WorkerPool(spawn=2, **kwargs)


async def test_queue_should_cap_the_calls_of_every_routine_that_shares_it(tmp_path):
    """Test the cap by order, not by timing: with the queue's two places held, calls of both routines wait."""
    release = tmp_path / "release"
    async with Signals() as signals, roomy_pool() as p:
        hold = routines.hold_until.options(queue=routines.DB)  # takes one of the queue's two places until released
        held = [asyncio.ensure_future(hold(str(release), signals.address, f"held{i}")) for i in range(2)]
        await signals.wait("start held0")
        await signals.wait("start held1")
        calls = [asyncio.ensure_future(routines.db_read(0.01, i)) for i in range(2)]
        calls += [asyncio.ensure_future(routines.db_write(0.01, i)) for i in range(2)]
        await eventually(lambda: p.stats().waiting_for_limits == 4)  # a cap not kept: they run and end instead
        assert not any(call.done() for call in calls)
        release.touch()
        async with asyncio.timeout(HANG_S):
            results = await asyncio.gather(*calls)
            await asyncio.gather(*held)
    assert max_overlap(results) <= 2  # never more than the cap once released (a bound no slow machine can break)
    assert collections.Counter(r[0] for r in results) == {"read": 2, "write": 2}


async def test_queue_should_let_a_call_with_a_higher_limit_start_first(tmp_path):
    release = tmp_path / "release"
    async with Signals() as signals, roomy_pool() as p:
        hold = routines.hold_until.options(queue=routines.DB)  # takes one of the queue's two places until released
        busy = [asyncio.ensure_future(hold(str(release), signals.address, f"busy{i}")) for i in range(2)]
        await signals.wait("start busy0")
        await signals.wait("start busy1")
        normal = asyncio.ensure_future(routines.db_read(0.01, "normal"))
        await eventually(lambda: p.stats().waiting_for_limits == 1)
        urgent = routines.span.options(queue=pool.Queue("db", concurrency=4))
        # The two places stay taken until the test releases them: a call that waited its turn behind
        # `normal` (FIFO) instead of using its higher limit never ends here (HANG_S).
        assert (await asyncio.wait_for(urgent(0.01, "urgent", signals.address), HANG_S))[0] == "urgent"
        assert not normal.done() and p.stats().waiting_for_limits == 1  # it went past normal, still waiting
        release.touch()
        async with asyncio.timeout(HANG_S):
            await asyncio.gather(*busy, normal)


async def test_concurrency_keys_should_limit_each_key_and_the_total(tmp_path):
    """Test the total by order (three keys held, a fourth key waits though free), then each key's limit and order."""
    tenants = pool.Queue("tenants", concurrency=1, total=3)
    release = tmp_path / "release"
    async with Signals() as signals, roomy_pool() as p:
        held = [
            asyncio.ensure_future(
                routines.hold_until.options(queue=tenants, key=f"tenant-{k}")(str(release), signals.address, f"t{k}")
            )
            for k in range(4)
        ]
        await eventually(lambda: signals.count("start t") == 3 and p.stats().waiting_for_limits == 1)
        assert signals.count("start t") == 3  # the total: the fourth key waits although its own place is free
        release.touch()
        async with asyncio.timeout(HANG_S):
            await asyncio.gather(*held)
        calls = [
            routines.span.options(queue=tenants, key=f"tenant-{k}")(0.05, (k, i)) for k in range(4) for i in range(3)
        ]
        results = await asyncio.gather(*calls)
    assert max_overlap(results) <= 3
    for k in range(4):
        mine = [r for r in results if r[0][0] == k]
        assert max_overlap(mine) == 1  # one at a time per key (an upper bound: spans of one key never overlap)
        assert [r[0][1] for r in sorted(mine, key=lambda r: r[2])] == [0, 1, 2]  # FIFO per key


async def test_workflow_of_ten_tasks_should_run_in_call_order_one_at_a_time():
    async with roomy_pool():
        step = routines.span.options(workflow="order-42")
        results = await asyncio.gather(*(step(0.02, i) for i in range(10)))
    assert [r[0] for r in sorted(results, key=lambda r: r[2])] == list(range(10))
    assert max_overlap(results) == 1


async def test_hundred_workflows_should_run_concurrently(tmp_path):
    """Test that workflows overlap and their own tasks do not, by counting who started, not by a run's length.

    Each workflow's first task holds until the test releases it: all hundred must start while none
    has ended (a pool that ran workflows one after another starts one, and `wait` runs into its bound),
    and no workflow's second task may start meanwhile.
    """
    release = tmp_path / "release"
    async with Signals() as signals, roomy_pool():
        first = [
            asyncio.ensure_future(
                routines.hold_until.options(workflow=f"wf-{w}")(str(release), signals.address, f"{w}-0")
            )
            for w in range(100)
        ]
        rest = [
            asyncio.ensure_future(routines.span.options(workflow=f"wf-{w}")(0.01, (w, i), signals.address))
            for w in range(100)
            for i in (1, 2)
        ]
        for w in range(100):
            await signals.wait(f"start {w}-0")  # all hundred first tasks run at once...
        assert signals.count("start (") == 0  # ...and no workflow's next task started beside its first
        release.touch()
        async with asyncio.timeout(HANG_S):
            assert await asyncio.gather(*first) == [f"{w}-0" for w in range(100)]
            results = await asyncio.gather(*rest)
    for w in range(100):
        mine = [r for r in results if r[0][0] == w]
        assert max_overlap(mine) == 1  # their own tasks do not overlap
        assert [r[0][1] for r in sorted(mine, key=lambda r: r[2])] == [1, 2]


async def test_failed_task_should_not_block_its_workflow_unless_asked():
    async with roomy_pool():
        fail = routines.failing_span.options(workflow="w1")
        ok = routines.span.options(workflow="w1")
        results = await asyncio.gather(fail(0.05, 0), ok(0.01, 1), return_exceptions=True)
        assert isinstance(results[0], RuntimeError) and results[1][0] == 1

        fail = routines.failing_span.options(workflow="w2", halt_on_error=True)
        ok = routines.span.options(workflow="w2")
        results = await asyncio.gather(fail(0.05, 0), ok(0.01, 1), ok(0.01, 2), return_exceptions=True)
        assert isinstance(results[0], RuntimeError)
        assert all(isinstance(r, pool.WorkflowHalted) for r in results[1:])
        assert "failing_span() failed earlier in workflow 'w2'" in str(results[1])
        cause = results[1].__cause__  # the failed call's own exception, as the README promises
        assert isinstance(cause, RuntimeError) and str(cause) == "task 0 failed"
        assert isinstance(cause.__cause__, pool.RemoteTraceback)  # ...with the worker's traceback under it
        assert (await ok(0.01, 3))[0] == 3  # the workflow starts afresh once its queue emptied


async def test_map_should_keep_three_of_twenty_in_flight_on_workers(tmp_path):
    """Test the window: three run at once (they hold until released, so a busy machine cannot end one first), never more."""
    release = tmp_path / "release"

    async def collect() -> list:
        items = [(str(release), signals.address, i) for i in range(20)]
        return [r async for r in pool.map(routines.held_span, items, concurrency=3)]

    async with Signals() as signals, roomy_pool() as p:
        mapped = asyncio.ensure_future(collect())
        for i in range(3):
            await signals.wait(f"start <{i}>")  # three in flight at once...
        release.touch()
        results = await asyncio.wait_for(mapped, HANG_S)
        assert p.stats().dispatched == 20
    assert sorted(r[0] for r in results) == list(range(20))
    assert max_overlap(results) <= 3  # ...and never more: the window (a bound no slow machine can break)


async def test_nested_calls_should_not_deadlock_workers_capped_at_one_task():
    async with pool.WorkerPool(spawn=2, backpressure=TaskCountBackpressure(1)):
        pids = await routines.recurse(5)
    assert len(pids) == 6


async def test_nested_calls_should_fail_when_waiting_tasks_hold_their_slots():
    async with pool.WorkerPool(spawn=2, backpressure=TaskCountBackpressure(1), hold_slot_while_waiting=True):
        with pytest.raises(pool.NoWorkersAvailable):
            await routines.recurse(5)


async def test_nested_call_into_its_callers_queue_should_borrow_the_slot_once_per_unit_of_concurrency():
    """Test seed 001's same-queue rule end to end: parent -> child runs in a queue of one."""
    async with roomy_pool():
        assert await asyncio.wait_for(routines.solo_recurse(1), 30) == 0
        assert await asyncio.wait_for(routines.duo_recurse(2), 30) == 0  # three levels in a queue of two


async def test_nested_chain_deeper_than_the_concurrency_should_raise_deadlock_promptly():
    """Test that parent -> child -> grandchild in a queue of one is a Deadlock (RECURSIVE_WAIT_DEADLOCK)."""
    async with roomy_pool():
        with pytest.raises(pool.Deadlock, match=r"solo_recurse\(\) waits for queue 'solo'"):
            await asyncio.wait_for(routines.solo_recurse(2), 30)
        with pytest.raises(pool.Deadlock, match=r"duo_recurse\(\) waits for queue 'duo'"):
            await asyncio.wait_for(routines.duo_recurse(3), 30)


async def test_stats_should_report_running_and_waiting_per_queue_and_key():
    tenants = pool.Queue("tenants", concurrency=1)
    async with Signals() as signals, roomy_pool() as p:
        calls = [
            asyncio.ensure_future(routines.span.options(queue=tenants, key=key)(0.5, key, signals.address))
            for key in ("acme", "acme", "acme", "globex")
        ]
        await signals.wait("start acme")
        await signals.wait("start globex")
        stats = p.stats()
        assert stats.limits["queue 'tenants' key 'acme'"] == pool.GateStats(running=1, waiting=2)
        assert stats.limits["queue 'tenants' key 'globex'"] == pool.GateStats(running=1, waiting=0)
        assert "queue 'tenants' key 'acme': 1 running, 2 waiting" in repr(p)
        await asyncio.gather(*calls)
        assert p.stats().limits == {}


async def test_cancelled_call_should_not_halt_its_workflow():
    async with Signals() as signals, roomy_pool():
        step = routines.span.options(workflow="w3", halt_on_error=True)
        first = asyncio.ensure_future(step(30, "first", signals.address))
        await signals.wait("start first")
        second = asyncio.ensure_future(step(0.01, "second"))
        first.cancel()  # the caller gives up: not a failure of the workflow
        with pytest.raises(asyncio.CancelledError):
            await first
        assert (await second)[0] == "second"
