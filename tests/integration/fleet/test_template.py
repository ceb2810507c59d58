"""Workers forked from a preloaded template: they run routines, are reaped, and outlive neither pool nor template's loss."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

import pytest

import pool
from pool._base._process import native_threads
from tests.integration.routines import common as routines
from tests.integration.support.child import alive, parent_of, run_script
from tests.integration.support.helpers import eventually, until_members

pytestmark = pytest.mark.integration


async def test_spawned_workers_should_be_forked_from_one_template_and_reaped_with_the_pool():
    async with pool.WorkerPool(spawn=3) as p:
        template = p.debug().template_pid
        assert {parent_of(pid) for pid in p.pids} == {template} and parent_of(template) == os.getpid()
        assert sorted({await routines.pid() for _ in range(30)}) <= sorted(p.pids)
        assert await routines.add(2, 2) == 4
        pids = p.pids
    assert not any(alive(pid) for pid in [*pids, template])  # reaped (by the template), then the template itself


async def test_without_the_template_each_worker_should_be_our_own_child():
    async with pool.WorkerPool(spawn=2, worker_template=False) as p:
        assert p.debug().template_pid is None
        assert {parent_of(pid) for pid in p.pids} == {os.getpid()}
        assert await routines.add(1, 2) == 3


async def test_a_killed_worker_should_be_replaced_and_a_lost_template_should_not_stop_the_pool():
    async with pool.WorkerPool(spawn=1) as p:
        (first,) = p.pids
        template = p.debug().template_pid
        os.kill(first, signal.SIGKILL)  # the template reaps it and reports -9: replaced from the template
        await until_members(
            p, lambda p: len(p.pids) == 1 and [m.pid for m in p.workers.values()] == p.pids and first not in p.pids
        )
        (second,) = p.pids
        assert parent_of(second) == template
        os.kill(template, signal.SIGKILL)  # the template is gone: its worker goes on (its lifeline is ours)
        await eventually(lambda: not p.debug().template_alive, timeout=30)
        assert await routines.add(1, 1) == 2
        os.kill(second, signal.SIGKILL)  # replaced from a fresh interpreter now
        await until_members(
            p,
            lambda p: len(p.pids) == 1 and [m.pid for m in p.workers.values()] == p.pids and second not in p.pids,
            timeout=60,
        )
        (third,) = p.pids
        assert parent_of(third) == os.getpid()
        assert await routines.add(2, 3) == 5


async def test_a_single_threaded_process_should_fork_the_template_from_itself(tmp_path):
    """Test the fork of the pool's own process: workers run routines (and programs), log to their own stderr,
    hold none of its ports, keep none of its warning filters; a template forked while another pool's sockets
    were open still exits when its pool closes; a process over the size limit gets a fresh interpreter."""
    log = tmp_path / "script.log"
    out, err = await run_script([sys.executable, "-m", "tests.integration.support.forked_template", str(log)])
    seen = json.loads(out)
    assert seen == {
        "forked": True,
        "template_parent_is_us": True,
        "workers_parent_is_template": True,
        "add": 5,
        "program": "hi\n",
        "worker_holds_our_port": False,
        "deprecated": "ok",
        "second_forked": True,
        "second_add": 2,
        "first_template_exit": 0,
        "second_add_after": 4,
        "large_forked": False,
        "large_add": 6,
    }
    assert "from the worker" in err.decode()  # the worker's own log handler, not the script's inherited one
    assert "from the worker" not in log.read_text()


async def test_a_process_with_another_thread_should_get_a_fresh_interpreter_template():
    """Test that the pool never forks a threaded process: with a thread running, the template is a fresh interpreter."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, args=(60,))
    thread.start()
    try:
        async with pool.WorkerPool(spawn=1) as p:
            assert native_threads() > 1 and not p.debug().template_forked
            assert await routines.add(1, 2) == 3
    finally:
        stop.set()
        thread.join()


async def test_template_fork_false_should_start_a_fresh_interpreter_template():
    async with pool.WorkerPool(spawn=1, template_fork=False) as p:
        assert not p.debug().template_forked
        assert {parent_of(pid) for pid in p.pids} == {p.debug().template_pid}
        assert await routines.add(1, 2) == 3


async def test_many_workers_started_at_once_should_all_come_from_the_template(monkeypatch):
    """Requests queue faster than the template forks: a full socket buffer means wait, not "template gone"."""
    monkeypatch.setenv("BALLAST", "x" * 60_000)  # every request carries the environment: 8 of them fill the buffer
    async with pool.WorkerPool(spawn=8) as p:
        assert p.debug().template_alive
        assert {parent_of(pid) for pid in p.pids} == {p.debug().template_pid}
