"""Tests for pool._fleet._local_worker: READY, INITFAIL and RETIRING lines, start timeouts, stop and kill.

The child is a short ``python -c`` script, not a worker: a fake template
(`ScriptTemplate`) starts it where `LocalWorker.start` asks the worker
template to fork one, so the pipes, the READY protocol and the reaping are
`LocalWorker`'s own, and no ``worker_main`` runs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping

import pytest

import pool
from pool._base._process import watch_exit
from pool._errors import WorkerInitError, WorkerStartError
from pool._fleet._local_worker import LocalWorker, child_env, init_error
from pool._transport import _wire

WORKER = uuid.UUID(int=0xC0DE)
WAIT_S = 30.0
"""Bound on every wait (a ``python -c`` child starts in tens of milliseconds; this is for a loaded machine)."""

PRELUDE = """
import json, os, sys
ready = int(os.environ["LEAKYPOOL_READY_FD"])
lifeline = int(os.environ["LEAKYPOOL_LIFELINE_FD"])
def say(line):
    os.write(ready, (line + "\\n").encode())
def wait_for_the_pool():
    os.read(lifeline, 1)  # returns when the pool's end closes
"""

READY = 'say("READY " + json.dumps({"unix_socket": "/run/w.sock", "pid": os.getpid(), "tags": ["a"], "capacity": 2}))'


class ScriptTemplate:
    """Stands in for `WorkerTemplate`: each ``fork`` runs ``script`` (after `PRELUDE`) with the worker's env and pipes.

    It reports each child's exit status, as the real template does.
    """

    def __init__(self, script: str) -> None:
        self.script = PRELUDE + script
        self.alive = True
        self.children: list[subprocess.Popen[bytes]] = []
        self.forgotten: list[int] = []
        self._statuses: dict[int, asyncio.Future[int]] = {}

    async def fork(self, env: Mapping[str, str], fds: tuple[int, int]) -> int:
        child = subprocess.Popen([sys.executable, "-c", self.script], env=dict(env), pass_fds=fds)
        self.children.append(child)
        watch_exit(child).add_done_callback(lambda exited: self.status(child.pid).set_result(exited.result()))
        return child.pid

    def status(self, pid: int) -> asyncio.Future[int]:
        if pid not in self._statuses:
            self._statuses[pid] = asyncio.get_running_loop().create_future()
        return self._statuses[pid]

    def forget(self, pid: int) -> None:
        self.forgotten.append(pid)

    def reap(self) -> None:
        """Kill and reap every child (a test's ``finally``)."""
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()


async def started(script: str, timeout: float = WAIT_S, **kwargs) -> tuple[LocalWorker, ScriptTemplate]:
    template = ScriptTemplate(script)
    worker = LocalWorker(WORKER, {"LEAKYPOOL_IDLE_TIMEOUT": "5"}, **kwargs)
    try:
        await worker.start(timeout, template)  # type: ignore[arg-type] - a stand-in for WorkerTemplate
    except BaseException:
        template.reap()
        raise
    return worker, template


class TestStart:
    async def test_start_should_return_the_metadata_the_ready_line_gives(self):
        """Test that the READY line's socket, pid, tags and capacity become the worker's record, marked local."""
        worker, template = await started(READY + "\nwait_for_the_pool()")
        try:
            metadata = worker.metadata
            assert metadata is not None
            assert metadata.address == "unix:/run/w.sock" and metadata.uid == WORKER
            assert metadata.pid == worker.pid == template.children[0].pid
            assert metadata.tags == frozenset({"a"}) and metadata.capacity == 2
            assert metadata.local and not metadata.tls
        finally:
            await worker.kill()
            template.reap()

    async def test_a_worker_on_tcp_should_be_reached_at_its_loopback_port(self):
        worker, template = await started('say("READY " + json.dumps({"port": 5123, "pid": 1}))\nwait_for_the_pool()')
        try:
            assert worker.metadata is not None and worker.metadata.address == "127.0.0.1:5123"
        finally:
            await worker.kill()
            template.reap()

    async def test_the_child_should_get_its_settings_and_no_other_leakypool_variable(self, monkeypatch):
        """Test that the child's environment holds the worker's settings, its pipes, and none of ours."""
        monkeypatch.setenv("LEAKYPOOL_STORE", "sqlite:///pool-only.db")
        script = 'say("READY " + json.dumps({"port": 1, "pid": 1, "tags": sorted(k for k in os.environ if k.startswith("LEAKYPOOL_"))}))\nwait_for_the_pool()'
        worker, template = await started(script)
        try:
            assert worker.metadata is not None
            assert worker.metadata.tags == {"LEAKYPOOL_IDLE_TIMEOUT", "LEAKYPOOL_READY_FD", "LEAKYPOOL_LIFELINE_FD"}
        finally:
            await worker.kill()
            template.reap()

    async def test_a_child_that_exits_first_should_raise_worker_start_error_with_its_status(self):
        with pytest.raises(WorkerStartError, match="exited with status 3 before it was ready"):
            await started("sys.exit(3)")

    async def test_a_silent_child_should_be_killed_and_reaped_at_the_timeout(self):
        """Test that a child that never says READY costs the timeout, then is killed and reaped."""
        template = ScriptTemplate("wait_for_the_pool()")
        worker = LocalWorker(WORKER, {})
        try:
            with pytest.raises(WorkerStartError, match=r"did not report READY within 0\.5s"):
                await worker.start(0.5, template)  # type: ignore[arg-type]
            assert worker.returncode == -signal.SIGKILL
            assert worker.stopping
        finally:
            template.reap()

    async def test_an_initializer_failure_should_raise_worker_init_error_with_the_exception(self):
        """Test that an INITFAIL line becomes a `WorkerInitError` whose cause is the initializer's exception."""
        blob, _ = _wire.pack_exception(KeyError("missing"), "the initializer")
        report = json.dumps(
            {"error": base64.b64encode(blob).decode(), "traceback": "Traceback...\nKeyError: 'missing'"}
        )
        with pytest.raises(WorkerInitError, match="its initializer raised KeyError: 'missing'") as error:
            await started(f"say('INITFAIL ' + {report!r})\nsys.exit(4)")
        assert isinstance(error.value.__cause__, KeyError)


class TestLife:
    async def test_a_retiring_line_should_reach_on_retiring_at_once_and_mark_the_exit_as_on_purpose(self):
        """Test that a RETIRING line is read while the worker still runs, and its reason kept after it exits."""
        told = asyncio.Event()
        retiring: list[LocalWorker] = []

        def on_retiring(worker: LocalWorker) -> None:
            retiring.append(worker)
            told.set()

        worker, template = await started(
            READY + '\nsay("RETIRING max tasks")\nwait_for_the_pool()', on_retiring=on_retiring
        )
        try:
            await asyncio.wait_for(told.wait(), WAIT_S)
            assert retiring == [worker] and worker.retired == "max tasks"
            assert worker.returncode is None  # still running: the pool hears it before the exit
            assert await asyncio.wait_for(worker.kill(), WAIT_S) == -signal.SIGKILL
            assert worker.retired == "max tasks" and retiring == [worker]
        finally:
            template.reap()

    async def test_a_retiring_line_read_with_the_ready_line_should_still_reach_on_retiring(self):
        """Test a RETIRING line that arrives in the same read as READY (both in the pipe): it is heard, not lost."""
        told = asyncio.Event()
        retiring: list[LocalWorker] = []

        def on_retiring(worker: LocalWorker) -> None:
            retiring.append(worker)
            told.set()

        both = 'os.write(ready, ("READY " + json.dumps({"port": 1, "pid": 1}) + "\\nRETIRING max tasks\\n").encode())'
        worker, template = await started(both + "\nwait_for_the_pool()", on_retiring=on_retiring)
        try:
            await asyncio.wait_for(told.wait(), WAIT_S)
            assert retiring == [worker] and worker.retired == "max tasks"
            await asyncio.wait_for(worker.kill(), WAIT_S)
        finally:
            template.reap()

    async def test_stop_should_terminate_and_reap_with_the_exit_status(self):
        """Test that stop sends SIGTERM (the child's default action ends it) and returns the reaped status."""
        worker, template = await started(READY + "\nwait_for_the_pool()")
        try:
            assert await asyncio.wait_for(worker.stop(grace=WAIT_S), WAIT_S * 2) == -signal.SIGTERM
            assert worker.returncode == -signal.SIGTERM and worker.stopping
            assert template.forgotten == [worker.pid]  # its status read, its pid let go
            assert worker.retired == ""  # stopped, not retired
        finally:
            template.reap()

    async def test_stop_should_kill_a_child_that_ignores_sigterm_after_the_grace(self):
        ignore = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        worker, template = await started(ignore + READY + "\nwait_for_the_pool()")
        try:
            assert await asyncio.wait_for(worker.stop(grace=0.0), WAIT_S) == -signal.SIGKILL
        finally:
            template.reap()

    async def test_retire_should_kill_it_as_not_a_crash(self):
        worker, template = await started(READY + "\nwait_for_the_pool()")
        try:
            worker.retire("memory")
            assert await asyncio.wait_for(worker.wait(), WAIT_S) == -signal.SIGKILL
            assert worker.retired == "memory" and not worker.stopping
        finally:
            template.reap()

    async def test_abandon_should_kill_it_without_marking_it_stopping(self):
        worker, template = await started(READY + "\nwait_for_the_pool()")
        try:
            worker.abandon()
            assert await asyncio.wait_for(worker.wait(), WAIT_S) == -signal.SIGKILL
            assert not worker.stopping and worker.retired == ""
        finally:
            template.reap()

    async def test_a_worker_never_started_should_stop_at_once(self):
        worker = LocalWorker(WORKER, {})
        assert await worker.stop(1.0) == 0 and await worker.kill() == 0
        assert worker.pid is None and worker.returncode is None


class TestChildEnv:
    def test_child_env_should_drop_our_leakypool_variables_and_carry_our_import_path(self, monkeypatch):
        monkeypatch.setenv("LEAKYPOOL_SECRET", "the pool's")
        monkeypatch.setenv("UNRELATED", "kept")
        monkeypatch.setattr(sys, "path", ["", "/a", "/a", "relative"])
        env = child_env({"LEAKYPOOL_MAX_TASKS": "3"})
        assert env["UNRELATED"] == "kept" and env["LEAKYPOOL_MAX_TASKS"] == "3"
        assert "LEAKYPOOL_SECRET" not in env
        assert env["PYTHONPATH"].split(os.pathsep) == [os.getcwd(), "/a", os.path.abspath("relative")]


class TestInitError:
    def test_a_garbled_report_should_still_give_a_worker_init_error(self):
        """Test that an INITFAIL payload that is not ours keeps the raw text rather than failing the pool."""
        error = init_error(WORKER, "not json at all")
        assert isinstance(error, pool.WorkerInitError)
        assert isinstance(error.__cause__, ValueError)
        assert "not json at all" in str(error.args)
