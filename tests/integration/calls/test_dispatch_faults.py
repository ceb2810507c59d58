"""The pool's dispatch loop: transient errors keep a worker, hard ones evict it, bugs propagate."""

from __future__ import annotations

import asyncio
import uuid

import grpc
import pytest

import pool
from balancer import PriorityLoadBalancer
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S

pytestmark = pytest.mark.integration


class NotAWorker:
    """A real gRPC server that serves nothing leakypool knows: every call is UNIMPLEMENTED."""

    async def __aenter__(self) -> str:
        self.server = grpc.aio.server()
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop(None)


class Buggy:
    """A balancer with a bug: it raises instead of yielding a candidate."""

    async def delegate(self, task, *, context):
        raise ValueError("balancer bug")
        yield  # pragma: no cover - makes this an async generator


async def test_hard_error_should_evict_the_worker_and_rotate_to_the_next():
    async with NotAWorker() as address:
        impostor = pool.WorkerMetadata(uid=uuid.UUID(int=1), address=address)  # lowest uid: offered first
        async with pool.WorkerPool(spawn=1, discovery=pool.StaticDiscovery(workers=[impostor])) as p:
            await p.wait_for_workers(2, timeout=30)
            assert await routines.add(1, 2) == 3  # RoundRobin reaches the impostor within two calls...
            assert await routines.add(1, 2) == 3
            assert impostor.uid not in p.workers and len(p.workers) == 1  # ...UNIMPLEMENTED evicted it


class Recording:
    """A balancer that drives PriorityLoadBalancer and records what it offered and what came back."""

    def __init__(self) -> None:
        self.offered: list[uuid.UUID] = []
        self.thrown: list[tuple[uuid.UUID, BaseException]] = []

    async def delegate(self, task, *, context):
        inner = PriorityLoadBalancer().delegate(task, context=context)
        try:
            uid = await anext(inner)
            while True:
                self.offered.append(uid)
                try:
                    accepted = yield uid
                except Exception as exc:  # noqa: BLE001 - records what the pool throws in, whatever it is
                    self.thrown.append((uid, exc))
                    uid = await inner.athrow(exc)
                    continue
                uid = await inner.asend(accepted)
        except StopAsyncIteration:
            return
        finally:
            await inner.aclose()


async def test_unreachable_worker_should_be_offered_rejected_as_transient_and_kept():
    dead = pool.WorkerMetadata(uid=uuid.UUID(int=1), address="127.0.0.1:1")  # nothing listens there; lowest uid
    recording = Recording()
    async with pool.WorkerPool(spawn=1, discovery=pool.StaticDiscovery(workers=[dead]), loadbalancer=recording) as p:
        await p.wait_for_workers(2, timeout=30)
        for _ in range(4):
            assert await routines.add(1, 2) == 3
        assert recording.offered.count(dead.uid) == 4  # offered first every time (priority order)...
        thrown = [exc for uid, exc in recording.thrown if uid == dead.uid]
        assert len(thrown) == 4 and all(isinstance(exc, pool.WorkerRejected) for exc in thrown)  # ...transient
        assert dead.uid in p.workers  # kept (set aside only after 10 s unreachable)


async def test_balancer_bug_should_propagate_and_change_no_membership():
    async with pool.WorkerPool(spawn=2, loadbalancer=Buggy()) as p:
        before = dict(p.workers)
        with pytest.raises(ValueError, match="balancer bug"):
            await routines.add(1, 2)
        assert p.workers == before


async def test_spawned_and_discovered_workers_should_share_one_pool():
    async with pool.WorkerPool(spawn=1) as helper:
        (remote,) = helper.workers.values()
        discovered = pool.WorkerMetadata(uid=remote.uid, address=remote.address)
        async with pool.WorkerPool(spawn=1, discovery=pool.StaticDiscovery(workers=[discovered])) as p:
            await p.wait_for_workers(2, timeout=30)
            pids = {await routines.pid() for _ in range(6)}
            assert pids == {remote.pid, *p.pids}


async def test_silent_worker_should_be_passed_over_after_the_accept_timeout():
    """Test that a silent worker is passed over by the accept timer: not sooner, and by nothing else.

    Not sooner is a lower bound (ACCEPT_TIMEOUT_S), which no slow machine can break. Not later is
    what the rejection the pool threw for it says: the accept timer's DEADLINE_EXCEEDED, naming the
    window; a pool that never gave up would run into HANG_S instead.
    """
    import os
    import signal
    import time

    from pool._call._calls import ACCEPT_TIMEOUT_S

    recording = Recording()
    async with pool.WorkerPool(spawn=2, loadbalancer=recording) as p:
        lowest = min(p.workers.values(), key=lambda m: m.uid.int)
        os.kill(lowest.pid, signal.SIGSTOP)  # alive, connected, and silent
        try:
            t0 = time.monotonic()
            assert await asyncio.wait_for(routines.pid(), HANG_S) != lowest.pid
            waited = time.monotonic() - t0
        finally:
            os.kill(lowest.pid, signal.SIGCONT)
    assert recording.offered[0] == lowest.uid  # offered first (priority order)...
    thrown = [exc for uid, exc in recording.thrown if uid == lowest.uid]
    assert len(thrown) == 1 and isinstance(thrown[0], pool.WorkerRejected)  # ...passed over, kept
    assert thrown[0].code == "DEADLINE_EXCEEDED"
    assert f"did not answer pid() within {ACCEPT_TIMEOUT_S:g}s" in str(thrown[0])
    assert waited >= ACCEPT_TIMEOUT_S * 0.9  # (a timer may fire a hair early)


async def test_broken_spawned_worker_should_be_replaced():
    from tests.integration.support.helpers import until_members

    async with pool.WorkerPool(spawn=1) as p:
        (uid,) = p.workers
        p._layers.fleet.replace(uid)  # what the pool does when a spawned worker fails hard
        await until_members(p, lambda p: len(p.workers) == 1 and uid not in p.workers)
        assert await routines.add(1, 2) == 3
