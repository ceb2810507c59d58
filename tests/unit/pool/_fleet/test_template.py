"""Tests for pool._fleet._template: the pool's side of the worker template.

`WorkerTemplate` runs the real template (a fresh interpreter, ``fork=False``)
but never asks it to fork a worker (that starts ``worker_main``: see
tests/integration/fleet/test_template.py). `ForkedWorker` watches a real
short-lived child, with a stand-in for the template that reports its status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket

import pytest

from pool._errors import WorkerStartError
from pool._fleet._local_worker import child_env
from pool._fleet._template import ForkedWorker, WorkerTemplate, _send_fds

WAIT_S = 30.0
"""Bound on every wait (the template imports the worker side in well under a second; this is for a loaded machine)."""


class StatusTemplate:
    """Stands in for `WorkerTemplate` as a `ForkedWorker` sees it: alive or not, and the statuses it reports."""

    def __init__(self, *, alive: bool = True) -> None:
        self.alive = alive
        self.forgotten: list[int] = []
        self._statuses: dict[int, asyncio.Future[int]] = {}

    def status(self, pid: int) -> asyncio.Future[int]:
        if pid not in self._statuses:
            self._statuses[pid] = asyncio.get_running_loop().create_future()
        return self._statuses[pid]

    def forget(self, pid: int) -> None:
        self.forgotten.append(pid)


def spawn(*argv: str) -> int:
    return os.posix_spawnp(argv[0], list(argv), os.environ)


def reap(pid: int) -> int | None:
    """Kill and reap ``pid`` if it is still ours; its exit status if this reaped it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    try:
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    except ChildProcessError:
        return None


class TestForkedWorker:
    async def test_exited_should_resolve_with_the_status_the_template_reports(self):
        """Test that the pidfd tells the end, and the status is the template's (the template reaps, not the pool)."""
        template = StatusTemplate()
        pid = spawn("sleep", "60")
        try:
            worker = ForkedWorker(pid, template)  # type: ignore[arg-type] - a stand-in for WorkerTemplate
            assert worker.poll() is None
            worker.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(reap, pid)  # as the template would, then it reports the status
            template.status(pid).set_result(code)
            assert await asyncio.wait_for(worker.exited, WAIT_S) == -signal.SIGTERM
            assert worker.returncode == worker.poll() == -signal.SIGTERM
            assert template.forgotten == [pid]
        finally:
            reap(pid)

    async def test_exited_should_be_minus_one_when_the_template_is_gone(self):
        """Test that with no template left to report a status, the end still resolves (-1), and at once."""
        template = StatusTemplate(alive=False)
        pid = spawn("sleep", "60")
        try:
            worker = ForkedWorker(pid, template)  # type: ignore[arg-type]
            worker.send_signal(signal.SIGKILL)
            assert await asyncio.wait_for(worker.exited, WAIT_S) == -1
            worker.send_signal(signal.SIGKILL)  # after its end: nothing is signalled, nothing raised
        finally:
            reap(pid)

    async def test_a_pid_that_is_gone_already_should_end_at_once(self):
        """Test that a worker that exited before it was watched (no pidfd to open) is not waited for forever."""
        template = StatusTemplate(alive=False)
        pid = spawn("true")
        reap(pid)
        worker = ForkedWorker(pid, template)  # type: ignore[arg-type]
        assert worker.exited.done() and worker.exited.result() == -1


class TestSendFds:
    async def test_send_fds_should_wait_for_room_rather_than_fail_when_the_socket_is_full(self):
        """Test that a full socket buffer means "later": the request goes once the template reads."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        r, w = os.pipe()
        try:
            ours.setblocking(False)
            filled = 0
            with contextlib.suppress(BlockingIOError):
                while True:
                    ours.send(b"x" * 1024)
                    filled += 1
            sending = asyncio.ensure_future(_send_fds(ours, b'{"request": 1}', (r, w)))
            await asyncio.sleep(0)  # (a turn: it found no room, and waits)
            assert not sending.done()
            for _ in range(filled):
                theirs.recv(4096)
            await asyncio.wait_for(sending, WAIT_S)
            message, fds, _, _ = socket.recv_fds(theirs, 4096, 2)
            for fd in fds:
                os.close(fd)
            assert message == b'{"request": 1}' and len(fds) == 2
        finally:
            for fd in (r, w):
                os.close(fd)
            ours.close()
            theirs.close()


@contextlib.asynccontextmanager
async def template_running():
    template = WorkerTemplate(child_env(), fork=False)
    try:
        await template.start(WAIT_S)
        yield template
    finally:
        await template.aclose()
        if template.pid is not None:
            reap(template.pid)


class TestWorkerTemplate:
    async def test_start_and_aclose_should_run_a_fresh_template_and_reap_it(self):
        """Test that a template started with ``fork=False`` is a fresh interpreter that says READY, and exits
        when told (status 0); statuses no one will report any more resolve to -1."""
        async with template_running() as template:
            assert template.alive and not template.forked and template.pid is not None
            assert "interpreter alive=True" in repr(template)
            waiting = template.status(12345)
        assert template.exit_status == 0 and not template.alive and template.pid is None
        assert waiting.result() == -1

    async def test_fork_should_raise_worker_start_error_once_closed(self):
        async with template_running() as template:
            pass
        r, w = os.pipe()
        try:
            with pytest.raises(WorkerStartError, match="not running"):
                await template.fork({}, (r, w))
        finally:
            os.close(r)
            os.close(w)

    async def test_a_template_that_dies_should_fail_requests_and_be_logged(self, caplog):
        """Test that a template killed from outside fails the next fork with `WorkerStartError`, says so in the
        log, and is no longer alive."""
        r, w = os.pipe()
        try:
            async with template_running() as template:
                with caplog.at_level(logging.WARNING, logger="leakypool.pool"):
                    assert template.pid is not None
                    os.kill(template.pid, signal.SIGKILL)
                    with pytest.raises(WorkerStartError):
                        await asyncio.wait_for(template.fork({}, (r, w)), WAIT_S)
                    async with asyncio.timeout(WAIT_S):
                        while template.alive:
                            await asyncio.sleep(0.01)  # its reader notices the socket's end within a turn or two
            assert template.exit_status == -signal.SIGKILL
            assert any("worker template exited" in record.getMessage() for record in caplog.records)
        finally:
            os.close(r)
            os.close(w)

    async def test_start_should_raise_worker_start_error_when_the_template_does_not_come_up(self, tmp_path):
        """Test that a template that exits before READY is reported with its status, and reaped."""
        (tmp_path / "sitecustomize.py").write_text("import os\nos._exit(5)\n")  # the interpreter leaves at start
        env = child_env()
        env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
        template = WorkerTemplate(env, fork=False)
        try:
            with pytest.raises(WorkerStartError, match="exited with status 5 before it was ready"):
                await template.start(WAIT_S)
            assert not template.alive and template.pid is None
        finally:
            await template.aclose()
