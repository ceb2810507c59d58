"""docs/grafana-dashboard.json queries only metrics a real pool and a real worker export."""

from __future__ import annotations

import json
import pathlib
import re

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.routines import common as routines
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration

DASHBOARD = pathlib.Path(__file__).resolve().parents[3] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\bleakypool_[a-z0-9_]+\b")
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
    "summary": ("_sum", "_count", "_created"),
    "unknown": ("",),
}


async def exported(url: str) -> set[str]:
    """Every series name a scrape of ``url`` declares: its samples, and what each family's type implies."""
    async with httpx.AsyncClient() as client:
        response = await client.get(url, timeout=10)
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.text):
        names |= {sample.name for sample in family.samples}
        names |= {family.name + suffix for suffix in SUFFIXES.get(family.type, ("",))}
    return names


def queried() -> dict[str, str]:
    """Each metric name the dashboard's queries use, with a panel that uses it."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = {}
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in METRIC.findall(target["expr"]):
                found.setdefault(name, panel["title"])
    return found


async def test_every_metric_the_dashboard_queries_should_be_exported(one_slot_pool, store_url):
    """Test the dashboard's names against a scrape of a pool with a store and of a worker's --metrics-port."""
    async with one_slot_pool(metrics_port=0, store=store_url) as p, worker("--metrics-port", "0") as w:
        assert await routines.add(1, 2) == 3
        await (await routines.add.submit(2, 2)).result(timeout=30)
        host, port = p.metrics_address
        names = await exported(f"http://{host}:{port}/metrics")
        names |= await exported(f"http://127.0.0.1:{w.info['metrics_port']}/metrics")
    wanted = queried()
    assert len(wanted) >= 15  # the dashboard covers the pool's and the workers' metrics
    missing = {name: panel for name, panel in wanted.items() if name not in names}
    assert not missing, f"queried but not exported: {missing}"
