"""A module registered with cloudpickle to go by value: its routines reach workers that cannot import it,
and its exceptions come back as its own classes, in every template mode and over TCP."""

from __future__ import annotations

import json
import sys

import pytest

import pool
from tests.integration.support import by_value
from tests.integration.support.child import run_script
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration


@pytest.fixture
def probe(tmp_path_factory):
    return by_value.load(tmp_path_factory.mktemp("by_value"))


async def test_a_template_forked_from_the_caller_should_give_back_the_callers_exception_classes(tmp_path):
    out, _ = await run_script([sys.executable, "-m", "tests.integration.support.by_value_forked", str(tmp_path)])
    seen = json.loads(out)
    assert seen == {"forked": True, "worker_could_import_it": True, **by_value.EXPECTED}


@pytest.mark.parametrize(
    "settings", [{"template_fork": False}, {"worker_template": False}], ids=["fresh-template", "no-template"]
)
async def test_workers_that_cannot_import_the_module_should_run_its_routines_by_value(probe, settings):
    async with pool.WorkerPool(spawn=1, **settings):
        seen = await by_value.check(probe)
    assert seen == {"worker_could_import_it": False, **by_value.EXPECTED}


async def test_a_worker_over_tcp_should_run_the_modules_routines_by_value(probe):
    async with worker() as w, pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
        await p.wait_for_workers(1, timeout=30)
        seen = await by_value.check(probe)
    assert seen == {"worker_could_import_it": False, **by_value.EXPECTED}
