"""The observation port over real HTTP: /metrics parsed as Prometheus text, /status as JSON."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import pool
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def scrape(p: pool.WorkerPool) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    host, port = p.metrics_address
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://{host}:{port}/metrics", timeout=10)
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def test_metrics_should_count_what_the_calls_did(one_slot_pool):
    """Test the counters, histograms and gauges against the calls this test made."""
    add, fail, sleep = (r.task((), {}).name for r in (routines.add, routines.fail, routines.sleep))
    async with Signals() as signals, one_slot_pool(metrics_port=0, max_pending=2, queue_depth=5) as p:
        assert p.metrics_address[0] == "127.0.0.1"
        for _ in range(5):
            assert await routines.add(1, 2) == 3
        for _ in range(2):
            with pytest.raises(ValueError):
                await routines.fail("boom")
        busy = asyncio.ensure_future(routines.sleep(600, signals.address, "busy"))
        await signals.wait("started busy")
        queued = asyncio.ensure_future(routines.add(2, 2))  # waits for the one slot
        await eventually(lambda: p.stats().waiting_for_worker == 1)
        with pytest.raises(pool.AdmissionRejected):
            await routines.add(3, 3)  # over max_pending=2
        m = await scrape(p)
        assert m[("leakypool_calls_total", (("outcome", "ok"), ("routine", add)))] == 5
        assert m[("leakypool_calls_total", (("outcome", "error"), ("routine", fail)))] == 2
        assert m[("leakypool_call_duration_seconds_count", (("routine", add),))] == 5
        assert m[("leakypool_queue_wait_seconds_count", (("routine", add),))] == 5
        assert m[("leakypool_admission_rejected_total", (("routine", add),))] == 1
        assert m[("leakypool_calls_running", ())] == 1
        assert m[("leakypool_calls_waiting", (("for", "worker"),))] == 1
        assert m[("leakypool_workers", (("kind", "local"),))] == 1
        busy.cancel()
        assert await queued == 4
        ((uid, signals),) = p.stats().worker_signals.items()  # the worker said "room" after turning the call away
        assert uid in p.workers and signals.capacity == 1 and 0 < signals.memory_fraction < 1
        with pytest.raises(asyncio.CancelledError):
            await busy
        m = await scrape(p)
        assert m[("leakypool_calls_total", (("outcome", "cancelled"), ("routine", sleep)))] == 1
        assert m[("leakypool_calls_total", (("outcome", "ok"), ("routine", add)))] == 6
        assert m[("leakypool_calls_running", ())] == 0


async def test_status_should_describe_workers_calls_and_jobs(one_slot_pool, store_url):
    """Test /status: one entry per worker with its own report, call counts, job counts from the store."""
    async with one_slot_pool(spawn=2, metrics_port=0, store=store_url) as p:
        await (await routines.add.submit(1, 2)).result(timeout=30)
        host, port = p.metrics_address
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            status = (await client.get("/status", timeout=10)).json()
            missing = await client.get("/nope", timeout=10)
            refused = await client.post("/status", timeout=10)
        assert sorted(w["pid"] for w in status["workers"]) == sorted(p.pids)
        assert all(w["in_flight"] == 0 and w["capacity"] == 1 and w["idle_s"] >= 0 for w in status["workers"])
        assert status["jobs"]["succeeded"] == 1 and status["calls"]["dispatched"] >= 1
        assert (missing.status_code, refused.status_code) == (404, 405)
        m = await scrape(p)
        assert m[("leakypool_jobs", (("state", "succeeded"),))] == 1


async def test_a_metrics_port_in_use_should_fail_at_pool_start_in_one_line(one_slot_pool):
    async with one_slot_pool(metrics_port=0) as p:
        taken = p.metrics_address[1]
        with pytest.raises(pool.ConfigError, match=f"metrics_port: cannot bind 127.0.0.1:{taken}") as caught:
            async with one_slot_pool(metrics_port=taken):
                pass  # pragma: no cover - not reached
        assert "\n" not in str(caught.value)


async def test_a_pool_without_metrics_port_should_serve_nothing(one_slot_pool):
    async with one_slot_pool() as p:
        assert p.metrics_address is None


async def test_recycles_should_be_counted_by_reason_in_metrics_and_status():
    """Test leakypool_worker_recycled_total{reason} and /status "recycled" after task recycles."""
    async with pool.WorkerPool(spawn=1, metrics_port=0, max_tasks_per_worker=1) as p:
        for _ in range(3):
            assert await routines.add(1, 1) == 2
        await eventually(lambda: p.stats().recycled.get("tasks", 0) >= 2)
        host, port = p.metrics_address
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            status = (await client.get("/status", timeout=10)).json()
        assert status["recycled"]["tasks"] >= 2 and status["recycled"]["memory"] == 0
        m = await scrape(p)
        assert m[("leakypool_worker_recycled_total", (("reason", "tasks"),))] >= 2
        assert m[("leakypool_worker_recycled_total", (("reason", "timeout"),))] == 0
