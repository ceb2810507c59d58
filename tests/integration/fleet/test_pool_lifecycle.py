"""A pool starts its workers, and no worker process survives its exit, however it exits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support.child import Child, alive
from tests.integration.support.helpers import eventually
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_spawn_should_start_that_many_workers():
    async with pool.WorkerPool(spawn=3) as p:
        assert len(p.workers) == 3
        assert len(set(p.pids)) == 3
        assert all(m.local and m.address.startswith("unix:") for m in p.workers.values())  # the default transport


async def test_spawn_should_default_to_one_worker_per_cpu():
    async with pool.WorkerPool() as p:
        assert len(p.workers) == (os.cpu_count() or 1)


async def test_spawn_should_read_leakypool_spawn(monkeypatch):
    monkeypatch.setenv("LEAKYPOOL_SPAWN", "1")
    async with pool.WorkerPool() as p:
        assert len(p.workers) == 1


async def test_exit_should_stop_and_reap_every_worker():
    async with pool.WorkerPool(spawn=2) as p:
        pids = p.pids
        assert await routines.add(1, 1) == 2
    assert not any(alive(pid) for pid in pids)


async def test_exit_should_reap_workers_when_the_body_raises():
    with pytest.raises(RuntimeError, match="body failed"):
        async with pool.WorkerPool(spawn=2) as p:
            pids = p.pids
            raise RuntimeError("body failed")
    assert not any(alive(pid) for pid in pids)


async def test_exit_should_reap_workers_when_the_body_is_cancelled():
    pids: list[int] = []
    entered = asyncio.Event()

    async def body() -> None:
        async with pool.WorkerPool(spawn=2) as p:
            pids.extend(p.pids)
            entered.set()
            await asyncio.sleep(3600)

    task = asyncio.ensure_future(body())
    await asyncio.wait_for(entered.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pids and not any(alive(pid) for pid in pids)


async def test_exit_should_let_in_flight_calls_finish_within_the_grace():
    async with Signals() as signals:
        async with pool.WorkerPool(spawn=1, shutdown_grace=10):
            call = asyncio.ensure_future(routines.sleep(0.5, signals.address, "draining"))
            await signals.wait("started draining")
        assert await call == 0.5


async def test_exit_should_fail_calls_that_outlive_the_grace():
    async with Signals() as signals:
        async with pool.WorkerPool(spawn=1, shutdown_grace=0.2):
            call = asyncio.ensure_future(routines.sleep(60, signals.address, "stuck"))
            await signals.wait("started stuck")
        with pytest.raises(pool.WorkerBroken):
            await asyncio.wait_for(call, 10)


async def test_workers_should_exit_when_the_pool_process_is_killed(tmp_path):
    script = tmp_path / "victim.py"
    script.write_text(
        textwrap.dedent(
            """
            import asyncio, sys
            import pool

            async def main():
                async with pool.WorkerPool(spawn=2) as p:
                    print(" ".join(map(str, [*p.pids, p.debug().template_pid])), flush=True)
                    await asyncio.sleep(3600)

            asyncio.run(main())
            """
        )
    )
    async with Child([sys.executable, str(script)], stdout=subprocess.PIPE, cwd=os.getcwd()) as child:
        line = await asyncio.wait_for(child.stdout.readline(), 60)
        pids = [int(x) for x in line.split()]
        assert len(pids) == 3  # two workers and the template they were forked from
        child.signal(signal.SIGKILL)
        await child.wait(30)
    # Orphans are re-parented to init; they notice the lifeline closing and exit. No event
    # reaches us from a process that is not our child, so this polls (bounded).
    await eventually(lambda: not any(alive(pid) for pid in pids), interval=0.05)


async def test_start_failure_should_raise_and_leave_no_process():
    with pytest.raises(pool.WorkerStartError, match=r"did not report READY within 0\.001s"):
        async with pool.WorkerPool(spawn=2, startup_timeout=0.001):
            pass  # pragma: no cover - not reached


async def test_pool_should_not_be_reentered():
    p = pool.WorkerPool(spawn=1)
    async with p:
        pass
    with pytest.raises(pool.PoolClosed):
        async with p:
            pass


async def test_repr_should_show_live_state():
    async with pool.WorkerPool(spawn=2) as p:
        await routines.add(1, 2)
        assert repr(p) == "<WorkerPool open [Workers: 2 (2 local) | Calls: 0 running, 0 waiting, 1 dispatched]>"
    assert repr(p).startswith("<WorkerPool closed [Workers: 0")


async def test_innermost_pool_should_receive_the_calls():
    async with pool.WorkerPool(spawn=1) as outer:
        async with pool.WorkerPool(spawn=1) as inner:
            assert await routines.pid() in inner.pids
        assert await routines.pid() in outer.pids
