"""Workers a pool did not spawn: static addresses, a local registry, and how they leave."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support import child
from tests.integration.support.helpers import until_members
from tests.integration.support.signals import Signals
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration


async def test_static_discovery_should_admit_a_standalone_worker_and_honour_its_task_cap():
    async with Signals() as signals, worker("--max-concurrent-tasks", "1") as w:
        discovery = pool.StaticDiscovery([f"127.0.0.1:{w.port}"])
        async with pool.WorkerPool(discovery=discovery) as p:
            await p.wait_for_workers(1, timeout=30)
            (metadata,) = p.workers.values()
            assert (str(metadata.uid), metadata.capacity, metadata.local) == (w.uid, 1, False)
            held = asyncio.ensure_future(routines.sleep(60, signals.address, "held"))
            await signals.wait("started held")
            with pytest.raises(pool.NoWorkersAvailable) as info:
                await routines.add(1, 2)
            assert info.value.__cause__.code == "RESOURCE_EXHAUSTED"
            held.cancel()
            await asyncio.gather(held, return_exceptions=True)


async def test_local_discovery_should_admit_registered_workers_and_drop_withdrawn_ones(tmp_path):
    registry = str(tmp_path / "registry")
    flags = ("--discovery", "local", "--local-registry", registry, "--max-concurrent-tasks", "0")
    async with worker(*flags, "--tags", "blue") as blue, worker(*flags, "--tags", "red") as red:
        async with pool.WorkerPool(discovery=pool.LocalDiscovery(registry, poll_interval=0.05), tags={"blue"}) as p:
            await p.wait_for_workers(1, timeout=30)
            assert [str(u) for u in p.workers] == [blue.uid] != [red.uid]  # red is filtered out by tags
            assert await routines.pid() == blue.pid
            # Withdrawn (its entry gone, as a draining worker removes it) while the worker still runs and
            # its connection stays open: only discovery can drop it, so no clock is needed to tell that
            # from a slower path (a closed stream, UNREACHABLE_EVICT_S); a discovery that missed the
            # withdrawal keeps it for good (until_members' bound).
            os.unlink(os.path.join(registry, f"{blue.uid}.json"))
            await until_members(p, lambda p: not p.workers)
            assert child.alive(blue.pid)
            blue.child.signal(signal.SIGTERM)
            assert await blue.child.wait(30) == 0


async def test_local_discovery_should_ignore_the_entry_of_a_killed_worker(tmp_path):
    registry = str(tmp_path / "registry")
    async with worker("--discovery", "local", "--local-registry", registry) as w:
        w.child.signal(signal.SIGKILL)
        await w.child.wait(30)
        events = pool.LocalDiscovery(registry).subscribe()
        first = asyncio.ensure_future(anext(events))
        done, _ = await asyncio.wait([first], timeout=0.5)
        assert not done  # nothing to announce: the entry's process is gone
        first.cancel()
        await asyncio.gather(first, return_exceptions=True)
        await events.aclose()
        assert not list((tmp_path / "registry").glob("*.json"))  # and the stale entry was removed


async def test_idle_worker_should_withdraw_refuse_and_exit_0(tmp_path):
    registry = str(tmp_path / "registry")
    async with worker("--discovery", "local", "--local-registry", registry, "--idle-timeout", "0.5") as w:
        async with pool.WorkerPool(discovery=pool.LocalDiscovery(registry, poll_interval=0.05)) as p:
            await p.wait_for_workers(1, timeout=30)
            assert await routines.add(1, 2) == 3
            assert await w.child.wait(30) == 0
            await until_members(p, lambda p: not p.workers)
            with pytest.raises(pool.NoWorkersAvailable, match="the pool is empty"):
                await routines.add(1, 2)


async def test_max_lifetime_should_finish_in_flight_work_refuse_new_and_exit_0(tmp_path):
    registry = str(tmp_path / "registry")
    flags = (
        "--discovery",
        "local",
        "--local-registry",
        registry,
        "--max-lifetime",
        "1.5",
        "--max-concurrent-tasks",
        "0",
    )
    async with Signals() as signals, worker(*flags) as w:
        async with pool.WorkerPool(discovery=pool.LocalDiscovery(registry, poll_interval=0.05)) as p:
            await p.wait_for_workers(1, timeout=30)
            long = asyncio.ensure_future(routines.sleep(3, signals.address, "long"))
            await signals.wait("started long")
            async with asyncio.timeout(30):
                while True:  # until the worker retires and says no (its state, bounded)
                    try:
                        await routines.add(1, 1)
                    except pool.NoWorkersAvailable:
                        break  # it refused (UNAVAILABLE), or has already withdrawn itself
                    await asyncio.sleep(0.1)
            assert await long == 3  # the call in flight was not lost
            assert await w.child.wait(30) == 0


async def test_sigterm_should_let_in_flight_work_finish_within_the_grace(tmp_path):
    async with Signals() as signals, worker("--shutdown-grace", "10", "--max-concurrent-tasks", "0") as w:
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
            await p.wait_for_workers(1, timeout=30)
            call = asyncio.ensure_future(routines.sleep(1, signals.address, "draining"))
            await signals.wait("started draining")
            w.child.signal(signal.SIGTERM)
            assert await call == 1
            assert await w.child.wait(30) == 0


async def test_stop_rpc_should_drain_the_worker_and_let_it_exit():
    async with Signals() as signals, worker("--max-concurrent-tasks", "0") as w:
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
            await p.wait_for_workers(1, timeout=30)
            call = asyncio.ensure_future(routines.sleep(0.5, signals.address, "last"))
            await signals.wait("started last")
            (connection,) = p._layers.roster.connections()
            state = await connection.stop(grace=10)
            assert (state.accepting, state.in_flight) == (False, 1)
            assert await call == 0.5  # in-flight work finishes within the grace
            assert await w.child.wait(30) == 0


async def test_static_discovery_double_should_drive_membership():
    metadata = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
    discovery = pool.StaticDiscovery(workers=[metadata])
    async with pool.WorkerPool(discovery=discovery) as p:
        await p.wait_for_workers(1, timeout=10)
        discovery.drop(metadata.uid)
        await until_members(p, lambda p: not p.workers, timeout=10)


async def test_sigterm_should_bound_a_drain_that_retiring_began():
    flags = ("--max-lifetime", "0.5", "--shutdown-grace", "0.5", "--max-concurrent-tasks", "0")
    async with Signals() as signals, worker(*flags) as w:
        async with pool.WorkerPool(discovery=pool.StaticDiscovery([f"127.0.0.1:{w.port}"])) as p:
            await p.wait_for_workers(1, timeout=30)
            call = asyncio.ensure_future(routines.sleep(60, signals.address, "endless"))
            await signals.wait("started endless")
            (uid,) = p.workers
            async with asyncio.timeout(30):
                while (await p.worker_states())[uid].accepting:
                    await asyncio.sleep(0.05)  # until the worker retires (its own report, bounded)
            w.child.signal(signal.SIGTERM)  # the retiring drain waits for nothing; SIGTERM must bound it
            assert await w.child.wait(30) == 0
            with pytest.raises(pool.WorkerBroken):
                await call


async def test_discovered_worker_should_leave_when_its_tags_stop_matching():
    blue = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1", tags=frozenset({"blue"}))
    discovery = pool.StaticDiscovery(workers=[blue])
    async with pool.WorkerPool(discovery=discovery, tags={"blue"}) as p:
        await p.wait_for_workers(1, timeout=10)
        discovery.add(pool.WorkerMetadata(uid=blue.uid, address=blue.address, tags=frozenset({"red"})))
        await until_members(p, lambda p: not p.workers, timeout=10)


async def test_provisioned_workers_should_be_asked_for_the_pool_tags_however_they_are_given(tmp_path):
    """``tags`` may be any iterable, a generator too: read once, a provisioned worker is started with them all
    (it would otherwise start untagged, and the pool, admitting only tagged workers, would never take it)."""
    asked = asyncio.Event()
    requests: list[pool.WorkerRequest] = []

    class Recording:
        async def provision(self, request: pool.WorkerRequest) -> None:
            requests.append(request)
            asked.set()
            raise OSError("recorded, not started")

    async with pool.WorkerPool(
        provisioner=Recording(),
        discovery=pool.StoreDiscovery(f"sqlite:///{tmp_path / 'registry.db'}", poll_interval=0.2),
        tags=(tag for tag in ["blue", "gpu"]),
        max_workers=1,
        dispatch_deadline=30,
    ):
        call = asyncio.ensure_future(routines.add(1, 2))  # waits for a worker: the pool provisions one
        try:
            await asyncio.wait_for(asked.wait(), timeout=30)
        finally:
            call.cancel()
    assert requests[0].env["LEAKYPOOL_TAGS"] == "blue,gpu"
