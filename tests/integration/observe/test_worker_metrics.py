"""A worker's own metrics and resource signals, over real HTTP and real gRPC."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pool
from backpressure import AnyOf, MemoryBackpressure, TaskCountBackpressure
from balancer import PriorityLoadBalancer
from tests.integration.routines import common as routines
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration

HIGHEST_UID = "ffffffff-ffff-7fff-bfff-ffffffffffff"


async def get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.get(f"http://127.0.0.1:{port}{path}", timeout=10)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_worker_metrics_should_count_its_tasks_and_rejections():
    """Test --metrics-port: completed, failed and rejected tasks, in flight and capacity, memory and lag."""
    async with worker("--metrics-port", "0", "--max-concurrent-tasks", "2") as w:
        port = int(w.info["metrics_port"])
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
            await p.wait_for_workers(1, timeout=30)
            for _ in range(3):
                assert await routines.add(1, 1) == 2
            with pytest.raises(ValueError):
                await routines.fail("boom")
            m = samples((await get(port, "/metrics")).text)
            status = (await get(port, "/status")).json()
    assert m[("leakypool_worker_tasks_total", (("outcome", "ok"),))] == 3
    assert m[("leakypool_worker_tasks_total", (("outcome", "error"),))] == 1
    assert m[("leakypool_worker_task_duration_seconds_count", ())] == 4
    assert m[("leakypool_worker_in_flight", ())] == 0 and m[("leakypool_worker_capacity", ())] == 2
    assert m[("leakypool_worker_memory_bytes", ())] > 10 * 2**20  # a Python process with grpc loaded
    assert 0 < m[("leakypool_worker_host_memory_fraction", ())] < 1
    assert m[("leakypool_worker_loop_lag_seconds", ())] >= 0
    assert (status["pid"], status["capacity"], status["in_flight"]) == (w.pid, 2, 0)
    assert status["memory_bytes"] > 10 * 2**20 and status["latency_p99_s"] > 0


async def test_a_bad_metrics_port_should_fail_at_start_in_one_line():
    from tests.integration.support.child import Child
    from tests.integration.support.workers import WORKER, clean_env

    async with Child([*WORKER, "--metrics-port", "70000"], env=clean_env(), stderr=-1) as child:
        assert await child.wait(30) == 2
        err = (await child.stderr.read()).decode().strip()
    assert err.count("\n") == 0 and "--metrics-port" in err and "70000" in err


async def test_a_worker_over_its_memory_limit_should_reject_and_the_balancer_should_rotate_past_it():
    """Test MemoryBackpressure end to end: RESOURCE_EXHAUSTED (transient), the worker is kept, the next one serves."""
    hook = AnyOf(TaskCountBackpressure(4), MemoryBackpressure(0.001))  # any host uses more than 0.1% of its memory
    async with (
        worker("--uid", HIGHEST_UID, "--max-concurrent-tasks", "4") as spare,
        pool.WorkerPool(
            spawn=1,
            backpressure=hook,
            loadbalancer=PriorityLoadBalancer(),
            discovery=pool.StaticDiscovery([f"127.0.0.1:{spare.port}"]),
        ) as p,
    ):
        await p.wait_for_workers(2, timeout=30)
        assert min(p.workers) != uuid_of(HIGHEST_UID)  # the spawned (rejecting) worker is offered first
        pids = {await routines.pid() for _ in range(10)}
        assert pids == {spare.pid}  # every call rotated past the worker over its limit...
        assert len(p.workers) == 2  # ...which was kept (a transient rejection evicts nobody)
        states = await p.worker_states()
        spawned = states[min(p.workers)]
        assert spawned.in_flight == 0 and spawned.memory_fraction > 0.001


def uuid_of(text: str):
    import uuid

    return uuid.UUID(text)
