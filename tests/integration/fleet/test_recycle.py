"""Worker set-up (initializer) and recycling (task and memory limits) with real workers; exits on purpose."""

from __future__ import annotations

import asyncio

import pytest

import pool
from tests.integration.routines import recycle_routines as r
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration


async def each_worker(p: pool.WorkerPool, routine, *args) -> dict[int, object]:
    """Call ``routine`` until every worker of ``p`` has answered once; results by worker pid."""
    seen: dict[int, object] = {}
    while len(seen) < len(p.pids):
        result = await routine(*args)
        seen[result["worker"]] = result
    return seen


class TestInitializer:
    async def test_initializer_should_run_once_in_each_worker_before_its_first_call(self):
        """Test that a plain initializer's module global, set with initargs, is what calls read, in every worker."""
        async with pool.WorkerPool(spawn=2, initializer=r.set_config, initargs=("small", 3)) as p:
            seen = await each_worker(p, r.read_config)
        assert set(seen) == set(p.pids) or len(seen) == 2
        for pid, config in seen.items():
            assert config["name"] == "small" and config["size"] == 3
            assert config["pid"] == pid  # it ran in that worker, not in the pool

    @pytest.mark.parametrize("transport", ["unix", "tcp"])  # routines on the main loop / on a thread's loop
    async def test_async_initializer_should_be_awaited(self, transport):
        """Test that an async def initializer runs to its end, on the routines' loop, before the worker serves."""
        async with pool.WorkerPool(
            spawn=1, initializer=r.set_config_async, initargs=("async",), local_transport=transport
        ):
            config = await r.read_config()
        assert config["kind"] == "async" and config["name"] == "async"

    async def test_initializer_defined_in_a_test_should_travel_by_value(self):
        """Test that a closure the worker cannot import is shipped by value (cloudpickle) and runs there."""
        marker = object.__name__  # a local value the closure captures

        def local_setup(size):
            r.CONFIG.update(name=marker, size=size)

        async with pool.WorkerPool(spawn=1, initializer=local_setup, initargs=(7,)):
            config = await r.read_config()
        assert config["name"] == "object" and config["size"] == 7

    async def test_raising_initializer_should_fail_the_pool_enter_with_its_cause(self):
        """Test that entering the pool raises WorkerInitError, the initializer's own exception as its cause."""
        with pytest.raises(pool.WorkerInitError) as caught:
            async with pool.WorkerPool(spawn=2, initializer=r.fail_to_load, initargs=("/models/x",)):
                pytest.fail("the pool opened")
        error = caught.value
        assert isinstance(error, pool.WorkerStartError)
        assert type(error.__cause__) is r.ModelMissing
        assert str(error.__cause__) == "no model at /models/x"
        assert "fail_to_load" in error.traceback and "no model at /models/x" in error.traceback
        assert "no model at /models/x" in str(error)

    def test_non_callable_initializer_should_be_a_type_error(self):
        """Test the standard library's error for an initializer that is not callable."""
        with pytest.raises(TypeError, match="initializer must be a callable"):
            pool.WorkerPool(spawn=1, initializer="setup")

    async def test_replacement_whose_initializer_raises_should_end_waiting_calls(self, tmp_path):
        """Test that calls end in WorkerInitError, not a wait to their deadline, once no worker can start."""
        switch = tmp_path / "switch"
        switch.write_text("ok")
        async with pool.WorkerPool(
            spawn=1, initializer=r.load_from, initargs=(str(switch),), max_tasks_per_worker=1, queue_depth=10
        ) as p:
            switch.write_text("fail")
            await r.worker_pid()  # its only call: the worker recycles, its replacement's initializer raises
            await eventually(lambda: p.debug().init_error is not None)
            with pytest.raises(pool.WorkerInitError) as caught:
                await r.worker_pid()
            assert type(caught.value.__cause__) is r.ModelMissing
            switch.write_text("ok")  # the pool heals: the next try after the back-off starts a worker
            await p.wait_for_workers(1, timeout=30)
            assert (await r.read_config())["loaded"] == str(switch)


class TestRecycling:
    async def test_task_limit_should_replace_workers_and_fail_no_call(self):
        """Test that workers recycle after their calls, every call succeeds, and no recycle counts as a crash."""
        async with pool.WorkerPool(spawn=2, max_tasks_per_worker=3) as p:
            first = set(p.pids)
            pids = [await r.worker_pid() for _ in range(30)]
            assert set(pids) - first  # workers changed
            counts = {pid: pids.count(pid) for pid in set(pids)}
            assert max(counts.values()) <= 3  # the limit is drawn in [3, 3.3]: 3
            assert p.stats().recycled["tasks"] >= 8
            assert (p.debug().crashes, p.debug().crash_streak) == (0, 0)  # no crash back-off was armed

    async def test_cpython_115634_case_should_finish_every_call(self):
        """Test 1 < max_tasks < calls / workers (ProcessPoolExecutor hangs there): 20 concurrent calls all succeed."""
        async with pool.WorkerPool(spawn=2, max_tasks_per_worker=2) as p:
            async with asyncio.timeout(120):  # a hang fails here, not in the suite's timeout
                pids = await asyncio.gather(*(r.worker_pid() for _ in range(20)))
            assert len(pids) == 20
            assert len(set(pids)) >= 10  # 2 calls a worker
            assert p.debug().crashes == 0

    async def test_memory_limit_should_recycle_a_worker_that_grew(self):
        """Test that a worker keeping 64 MiB past a 32 MiB limit is replaced, and calls go on succeeding."""
        async with pool.WorkerPool(spawn=1, max_memory_per_worker="32MiB") as p:
            small = await r.worker_pid()
            assert await r.worker_pid() == small  # small calls leave it under its limit
            grown = await r.hoard(64)
            assert grown == small
            after = [await r.worker_pid() for _ in range(3)]
            assert small not in after
            assert p.stats().recycled == {"memory": 1}
            assert p.debug().crashes == 0

    async def test_retired_worker_should_be_replaced_without_backoff(self):
        """Test that `LocalFleet.retire` (a hard timeout's kill) replaces the worker as a recycle, not a crash."""
        async with pool.WorkerPool(spawn=1) as p:
            (uid,) = p.workers
            old = p.pids
            assert p._layers.fleet.retire(uid)
            async with asyncio.timeout(60):
                pid = await r.worker_pid()  # waits for the replacement instead of failing on an empty pool
            assert [pid] != old
            assert p.stats().recycled == {"timeout": 1}
            assert (p.debug().crashes, p.debug().crash_streak) == (0, 0)

    async def test_worker_retiring_itself_should_be_replaced_without_backoff(self):
        """Test that `retire_now` (a worker ending itself at a hard timeout) counts as a recycle, not a crash."""
        async with pool.WorkerPool(spawn=1) as p:
            (old,) = p.pids
            with pytest.raises(pool.WorkerBroken):
                await r.retire_here()
            async with asyncio.timeout(60):
                pid = await r.worker_pid()
            assert pid != old
            await eventually(lambda: p.stats().recycled == {"timeout": 1})
            assert (p.debug().crashes, p.debug().crash_streak) == (0, 0)
