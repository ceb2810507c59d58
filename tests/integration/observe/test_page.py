"""The page at ``GET /`` in a real Chromium, against a real busy pool: what it shows is what the pool did."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.integration.routines import common as routines
from tests.integration.support.browser import chromium_page
from tests.integration.support.child import Child
from tests.integration.support.signals import Signals
from tests.integration.support.workers import WORKER, clean_env, worker

pytestmark = pytest.mark.integration

WAIT_MS = 30_000
"""How long the page gets to show a change (it polls every 250 ms here)."""


async def shows(page, selector: str, text: str) -> None:
    """Wait until the element at ``selector`` reads ``text``."""
    await page.wait_for_function(
        "([s, t]) => { const e = document.querySelector(s); return e !== null && e.textContent.trim() === t; }",
        arg=[selector, text],
        timeout=WAIT_MS,
    )


async def painted(page) -> int:
    """Pixels of the occupancy chart's plot area that are not blank."""
    return await page.evaluate("""() => {
        const c = document.getElementById('chart'), g = c.getContext('2d');
        const d = g.getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
        return n;
    }""")


async def test_page_should_show_workers_in_flight_and_failed_jobs_as_the_pool_runs_them(
    one_slot_pool, store_url, tmp_path
):
    """Test the page against the pool: worker count, in flight rising and falling, a failed job appearing."""
    async with (
        Signals() as signals,
        one_slot_pool(spawn=2, metrics_port=0, store=store_url) as p,
        chromium_page(tmp_path / "profile") as page,
    ):
        host, port = p.metrics_address
        errors: list[str] = []  # script errors, and anything the page's Content-Security-Policy blocked
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        await page.goto(f"http://{host}:{port}/?every=250")
        await shows(page, "#conn", "live")
        await shows(page, "#workers-alive", "2")
        await shows(page, "#in-flight", "0 / 2")
        assert await page.locator("#workers tbody tr[data-uid]").count() == 2
        for uid in p.workers:
            await shows(page, f'#workers tr[data-uid="{uid}"] .count', "0 / 1")

        busy = [asyncio.ensure_future(routines.sleep(600, signals.address, f"busy{i}")) for i in range(2)]
        try:
            for i in range(2):
                await signals.wait(f"started busy{i}")
            await shows(page, "#in-flight", "2 / 2")
            for uid in p.workers:
                await shows(page, f'#workers tr[data-uid="{uid}"] .count', "1 / 1")
            peak = await page.evaluate(
                "() => Math.max(...trail.filter(p => !p.gap).map(p => "
                "Object.values(p.flight).reduce((a, b) => a + b, 0)))"
            )
            assert peak == 2
        finally:  # also when an assertion failed: no call outlives the test
            for call in busy:
                call.cancel()
            await asyncio.gather(*busy, return_exceptions=True)
        await shows(page, "#in-flight", "0 / 2")
        assert await painted(page) > 0

        job = await routines.fail.submit("page-visible failure 7431")
        with pytest.raises(ValueError):
            await job.result(timeout=30)
        row = f'#failed-jobs li[data-job-id="{job.id}"]'
        await page.wait_for_selector(row, timeout=WAIT_MS)
        assert "page-visible failure 7431" in await page.locator(row).inner_text()
        await shows(page, '#jobs .chip[data-state="failed"] .n', "1")
        assert (await page.locator("#workers-alive").inner_text()) == str(len(p.workers))
        assert errors == []


async def test_page_should_keep_polling_across_a_pool_restart(one_slot_pool, tmp_path):
    """Test that the page says it lost the pool, then shows the new one on the same port by itself."""
    async with chromium_page(tmp_path / "profile") as page:
        async with one_slot_pool(spawn=1, metrics_port=0) as p:
            host, port = p.metrics_address
            await page.goto(f"http://{host}:{port}/?every=250")
            await shows(page, "#workers-alive", "1")
            await shows(page, "#conn", "live")
        await shows(page, "#conn", "offline")
        async with one_slot_pool(spawn=2, metrics_port=port) as p:
            await shows(page, "#conn", "live")
            await shows(page, "#workers-alive", "2")
            for uid in p.workers:
                await page.wait_for_selector(f'#workers tr[data-uid="{uid}"]', timeout=WAIT_MS)
            gaps = await page.evaluate("() => trail.filter(p => p.gap).length")
            assert gaps >= 1  # the chart leaves the time the port was away blank


async def test_page_off_loopback_style_should_need_its_token(one_slot_pool, tmp_path, monkeypatch):
    """Test a port with a token: nothing without it, the page and its polls with it."""
    monkeypatch.setenv("LEAKYPOOL_METRICS_TOKEN", "s3cret-token")
    async with one_slot_pool(spawn=1, metrics_port=0) as p, chromium_page(tmp_path / "profile") as page:
        host, port = p.metrics_address
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            refused = [(await client.get(path, timeout=10)).status_code for path in ("/", "/status", "/metrics")]
            wrong = await client.get("/status", headers={"Authorization": "Bearer nope"}, timeout=10)
            right = await client.get("/status", headers={"Authorization": "Bearer s3cret-token"}, timeout=10)
        assert refused == [401, 401, 401] and wrong.status_code == 401
        assert json.loads(right.text)["kind"] == "pool"
        await page.goto(f"http://{host}:{port}/?every=250&token=s3cret-token")
        await shows(page, "#conn", "live")
        await shows(page, "#workers-alive", "1")


async def test_worker_port_should_serve_the_page_for_that_worker(tmp_path):
    """Test a worker's ``--metrics-port``: the same page, reading the worker's own /status."""
    async with (
        worker("--metrics-port", "0", "--max-concurrent-tasks", "3") as w,
        chromium_page(tmp_path / "profile") as page,
    ):
        await page.goto(f"http://127.0.0.1:{w.info['metrics_port']}/?every=250")
        await shows(page, "#conn", "live")
        await shows(page, "#workers-alive", "1")
        await shows(page, "#in-flight", "0 / 3")
        await page.wait_for_selector(f'#workers tr[data-uid="{w.uid}"]', timeout=WAIT_MS)


async def test_worker_port_with_a_token_should_refuse_requests_without_it():
    """Test ``--metrics-token`` on a worker: 401 without it, the page and /status with it."""
    async with worker("--metrics-port", "0", "--metrics-token", "w0rker") as w:
        base = f"http://127.0.0.1:{w.info['metrics_port']}"
        async with httpx.AsyncClient(base_url=base) as client:
            refused = (await client.get("/status", timeout=10)).status_code
            page = await client.get("/?token=w0rker", timeout=10)
            status = await client.get("/status", headers={"Authorization": "Bearer w0rker"}, timeout=10)
    assert refused == 401
    assert page.status_code == 200 and "connect-src 'self'" in page.headers["content-security-policy"]
    assert status.json()["uid"] == w.uid


async def test_worker_off_loopback_without_a_token_should_not_start():
    """Test that a worker refuses, in one line, to show its port off loopback without a token."""
    args = [*WORKER, "--metrics-port", "0", "--metrics-host", "0.0.0.0"]
    async with Child(args, env=clean_env(), stderr=-1) as child:
        err = (await asyncio.wait_for(child.stderr.read(), 60)).decode().strip()
        assert await child.wait(60) == 2
    assert err.count("\n") == 0 and "--metrics-host: expected a loopback address unless a metrics token is set" in err
