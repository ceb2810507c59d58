"""Capacity beyond this host, on one host: provisioned workers found through a store registry.

Real worker processes (``worker_main.py --registry``), started by a real
`CommandProvisioner` or by the test, a real SQLite file and a real
PostgreSQL server. The cross-host version (network namespaces with no
multicast route) is tests/integration/fleet/test_capacity_netns.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sqlite3
import sys

import pytest

import pool
from backpressure import TaskCountBackpressure
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually, until_members
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration

WORKER_COMMAND = [sys.executable, "worker_main.py", "{worker_args}", "--log-level", "WARNING"]


@pytest.fixture(params=["sqlite", "postgresql"])
def registry_url(request, tmp_path) -> str:
    """A fresh registry: an SQLite file, or a database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'registry.db'}"
    return request.getfixturevalue("postgres_url")


async def recorded(url: str) -> set[str]:
    """Uids with a row in the registry (expired or not): what is left behind."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite://"))) as db:
            try:
                return {uid for (uid,) in db.execute("SELECT uid FROM leakypool_workers")}
            except sqlite3.OperationalError:
                return set()
    import asyncpg

    db = await asyncpg.connect(url)
    try:
        return {r["uid"] for r in await db.fetch("SELECT uid FROM leakypool_workers")}
    finally:
        await db.close()


def one_slot_pool(url: str, provisioner: pool.Provisioner, **kwargs: object) -> pool.WorkerPool:
    return pool.WorkerPool(
        provisioner=provisioner,
        discovery=pool.StoreDiscovery(url, poll_interval=0.2),
        backpressure=TaskCountBackpressure(1),
        queue_depth=100,
        **kwargs,
    )


async def test_a_burst_should_grow_provisioned_workers_to_max_workers_and_drain_to_none(registry_url):
    provisioner = pool.CommandProvisioner(WORKER_COMMAND)
    async with one_slot_pool(registry_url, provisioner, max_workers=3, idle_timeout=1.0) as p:
        assert len(p.workers) == 0
        peak = 0

        async def call(i: int) -> int:
            nonlocal peak
            peak = max(peak, len(p.workers))
            await routines.sleep(0.5)
            return i

        assert await asyncio.gather(*(call(i) for i in range(12))) == list(range(12))
        peak = max(peak, len(p.workers))
        assert peak == 3 and p.stats().grown >= 3
        await eventually(lambda: not provisioner.pids, timeout=60)  # each idles out and exits...
        assert await recorded(registry_url) == set()  # ...removing its record (it would live 15 s more)
        await until_members(p, lambda p: not p.workers)


async def test_a_failing_provisioner_should_be_logged_and_counted_and_the_work_should_wait(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    failing = pool.CommandProvisioner(["sh", "-c", "echo no capacity in us-east-1a >&2; exit 3"])
    caplog.set_level(logging.WARNING, logger="leakypool.pool")
    async with one_slot_pool(url, failing, max_workers=2) as p:
        call = asyncio.ensure_future(routines.pid())
        await eventually(lambda: p.stats().provision_failures >= 1)
        assert not call.done()  # still waiting for a worker
        (line,) = {r.getMessage() for r in caplog.records if "provisioner" in r.getMessage()}
        assert "exited with status 3" in line and "no capacity in us-east-1a" in line
        async with worker("--registry", url) as w:  # capacity appears by other means: the call is served
            assert await asyncio.wait_for(call, 30) == w.pid


async def test_a_provisioner_that_keeps_failing_should_end_the_wait_at_the_dispatch_deadline(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    failing = pool.CommandProvisioner(["false"])
    async with one_slot_pool(url, failing, max_workers=2, dispatch_deadline=1.5, metrics_port=0) as p:
        with pytest.raises(pool.CapacityTimeout):
            await routines.add(1, 2)
        assert p.stats().provision_failures >= 1
        import httpx

        host, port = p.metrics_address
        async with httpx.AsyncClient() as client:
            text = (await client.get(f"http://{host}:{port}/metrics")).text
        assert f"leakypool_provision_failures_total {float(p.stats().provision_failures)}" in text


async def test_a_request_that_never_joins_should_stop_counting_after_provision_timeout(tmp_path, caplog):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    silent = pool.CommandProvisioner(["true"])  # succeeds, starts nothing
    caplog.set_level(logging.WARNING, logger="leakypool.pool")
    async with one_slot_pool(url, silent, max_workers=1, provision_timeout=0.5) as p:
        call = asyncio.ensure_future(routines.add(1, 2))
        await eventually(lambda: any("has not joined" in r.getMessage() for r in caplog.records), timeout=30)
        async with worker("--registry", url):
            assert await asyncio.wait_for(call, 30) == 3
        assert p.stats().provision_failures == 0


async def test_the_registry_should_drop_a_worker_that_exits_and_expire_one_that_is_killed(registry_url):
    async with (
        worker("--registry", registry_url, "--registry-ttl", "60") as leaving,
        worker("--registry", registry_url, "--registry-ttl", "1.5") as killed,
    ):
        async with pool.WorkerPool(discovery=pool.StoreDiscovery(registry_url, poll_interval=0.2)) as p:
            await until_members(p, lambda p: len(p.workers) == 2)
            leaving.child.signal(signal.SIGTERM)
            # removed on exit, not expired: its record would live 60 s, longer than this wait's bound
            await until_members(p, lambda p: {str(u) for u in p.workers} == {killed.uid}, timeout=45)
            assert await leaving.child.wait(30) == 0
            assert await recorded(registry_url) == {killed.uid}
            killed.child.signal(signal.SIGKILL)
            await killed.child.wait(30)
            # expires 1.5 s after its last refresh; the bound is generous for a loaded machine, not a measure
            await until_members(p, lambda p: not p.workers, timeout=30)
            assert await recorded(registry_url) == set()


async def test_a_restarted_pool_and_a_second_pool_should_find_the_live_workers(registry_url):
    async with worker("--registry", registry_url, "--max-concurrent-tasks", "0") as w:
        for _ in range(2):  # the second round is the pool restarted
            async with pool.WorkerPool(discovery=pool.StoreDiscovery(registry_url)) as first:
                await first.wait_for_workers(1, timeout=30)
                assert await routines.pid() == w.pid
                async with pool.WorkerPool(discovery=pool.StoreDiscovery(registry_url)) as second:  # shares the worker
                    await second.wait_for_workers(1, timeout=30)
                    assert await routines.pid() == w.pid
                assert await routines.pid() == w.pid


async def test_a_worker_should_refuse_to_start_with_a_registry_it_cannot_reach(tmp_path):
    from tests.integration.support.child import Child
    from tests.integration.support.workers import WORKER, clean_env

    bad = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'registry.db'}"
    async with Child([*WORKER, "--registry", bad], env=clean_env(), stderr=asyncio.subprocess.PIPE) as child:
        assert await child.wait(30) == 2
        assert child.stderr is not None
        line = (await child.stderr.read()).decode()
        assert "--registry: cannot record this worker" in line


async def test_the_provisioned_occupancy_plot_should_grow_to_max_and_drain_with_every_call_served(tmp_path):
    import json
    import subprocess

    out = tmp_path / "provisioned.png"
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bench.plots.provisioned", "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["max_workers_alive"] == 6 and report["failed"] == 0 and report["records_left"] == 0
    assert report["time_to_first_worker_s"] is not None and report["time_to_drain_s"] is not None


async def test_jobs_should_wait_for_a_provisioned_worker_and_run_on_it(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    provisioner = pool.CommandProvisioner(WORKER_COMMAND)
    jobs_url = f"sqlite:///{tmp_path / 'jobs.db'}"
    async with one_slot_pool(url, provisioner, max_workers=1, idle_timeout=1.0, store=jobs_url) as p:
        jobs = [await routines.add.submit(i, 1) for i in range(3)]
        assert [await j.result(timeout=60) for j in jobs] == [1, 2, 3]
        assert p.stats().grown == 1
        await eventually(lambda: not provisioner.pids, timeout=60)


async def test_an_explicit_subprocess_provisioner_should_grow_the_local_fleet_from_none():
    async with pool.WorkerPool(
        provisioner=pool.SubprocessProvisioner(),
        max_workers=2,
        idle_timeout=1.0,
        backpressure=TaskCountBackpressure(1),
        queue_depth=10,
    ) as p:
        assert p.stats().local_workers == 0
        assert sorted(await asyncio.gather(*(routines.add(i, 0) for i in range(4)))) == [0, 1, 2, 3]
        assert 1 <= p.stats().grown <= 2 and all(m.local for m in p.workers.values())


async def test_a_failed_command_should_say_why_without_the_registry_password():
    import uuid

    failing = pool.CommandProvisioner(["sh", "-c", 'echo "bad flag: $1" >&2; exit 4', "sh", "{worker_args}"])
    request = pool.WorkerRequest(uuid.uuid4(), {}, ("--registry", "postgresql://app:hunter2@db/app"))
    with pytest.raises(pool.ProvisionError) as info:
        await failing.provision(request)
    assert "exited with status 4" in str(info.value) and "bad flag: --registry" in str(info.value)
    assert "hunter2" not in str(info.value)
    await failing.aclose()


async def test_a_command_that_echoes_its_arguments_should_not_leak_a_password(caplog):
    import uuid

    # like `sh -x` or docker, it echoes its arguments (the registry URL in the worker's flags); the template has one too
    echoing = pool.CommandProvisioner(
        ["sh", "-c", 'echo "+ $0 $*" >&2; exit 5', "postgres://ops:t3mplate@db/x?password=p4ram", "{worker_args}"]
    )
    request = pool.WorkerRequest(uuid.uuid4(), {}, ("--registry", "postgresql://app:hunter2@db/app"))
    with pytest.raises(pool.ProvisionError) as info:
        await echoing.provision(request)
    text = f"{info.value} {echoing!r}"
    assert "exited with status 5" in str(info.value)
    assert "--registry postgresql://app:***@db/app" in str(info.value)  # the tail is still quoted, masked
    assert "hunter2" not in text and "t3mplate" not in text and "p4ram" not in text
    await echoing.aclose()
