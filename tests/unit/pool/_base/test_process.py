"""Tests for pool._base._process: children reaped from the loop, and what this process can tell of itself."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from pool._base._process import ForkedChild, descriptors, resident_bytes, watch_exit

WAIT_S = 30.0
"""Bound on every wait for a child (a short-lived one exits in milliseconds; this is for a loaded machine)."""


def spawn(*argv: str) -> int:
    """Start ``argv`` as a child of this process and return its pid (no `subprocess.Popen` to reap it for us)."""
    return os.posix_spawnp(argv[0], list(argv), os.environ)


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """No garbage collection inside: an earlier test's unreachable socket cannot close a descriptor meanwhile."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def reap(pid: int) -> None:
    """Kill and reap ``pid`` if it is still ours (a test's ``finally``)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


class TestForkedChild:
    def test_poll_should_be_none_while_it_runs_and_its_status_once_it_exits(self):
        """Test that poll says None for a running child, then its exit status (reaping it), then the same again."""
        # Arrange
        release_r, release_w = os.pipe()
        pid = os.posix_spawnp(
            sys.executable,
            python("import os, sys; os.read(0, 1); sys.exit(7)"),
            os.environ,
            file_actions=[(os.POSIX_SPAWN_DUP2, release_r, 0)],  # its stdin: the pipe's read end
        )
        os.close(release_r)
        child = ForkedChild(pid)
        try:
            # Act / Assert
            assert child.poll() is None
            os.write(release_w, b"x")
            assert child.wait() == 7
            assert child.poll() == 7
            assert child.returncode == 7
            with pytest.raises(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reaped by wait: no zombie left
        finally:
            os.close(release_w)
            reap(pid)

    def test_wait_should_return_the_negative_signal_when_it_is_killed(self):
        """Test that kill SIGKILLs a running child and wait then reports -9."""
        pid = spawn("sleep", "60")
        child = ForkedChild(pid)
        try:
            child.kill()
            assert child.wait() == -signal.SIGKILL
        finally:
            reap(pid)

    def test_poll_and_wait_should_return_minus_one_when_someone_else_reaped_it(self):
        """Test that a child reaped elsewhere (a waitpid(-1) watcher) reads as -1, not an error."""
        pid = spawn("true")
        try:
            os.waitpid(pid, 0)  # someone else reaps it
            assert ForkedChild(pid).poll() == -1
            assert ForkedChild(pid).wait() == -1
        finally:
            reap(pid)

    def test_kill_should_not_signal_when_it_was_reaped_already(self):
        """Test that kill after the child was reaped sends nothing (its pid may be another process's by now)."""
        pid = spawn("true")
        bystander = spawn("sleep", "60")  # the process that now has the pid, as far as the child object knows
        child = ForkedChild(pid)
        try:
            assert child.wait() == 0
            child.pid = bystander
            child.kill()
            assert os.waitpid(bystander, os.WNOHANG) == (0, 0)  # still running: not signalled
        finally:
            reap(pid)
            reap(bystander)


class TestDescriptors:
    def test_descriptors_should_list_an_open_file_with_its_identity_until_it_is_closed(self, tmp_path):
        """Test that a descriptor opened here shows with its file's (device, inode), and goes once closed."""
        path = tmp_path / "f"
        path.write_bytes(b"")
        fd = os.open(path, os.O_RDONLY)
        try:
            stat = os.stat(path)
            assert descriptors()[fd] == (stat.st_dev, stat.st_ino)
        finally:
            os.close(fd)
        assert fd not in descriptors()

    def test_descriptors_should_not_list_the_listing_of_proc_itself(self):
        """Test that every descriptor listed is open after the call (the listing's own one is left out)."""
        with no_collection():  # (a socket collected meanwhile would close one of them)
            for fd in descriptors():
                os.fstat(fd)


class TestResidentBytes:
    def test_resident_bytes_should_grow_when_memory_is_touched(self):
        """Test that RSS is a positive byte count that follows memory this process writes to."""
        before = resident_bytes()
        block = bytearray(64 << 20)  # zeroed by the kernel on first touch: every page written here
        for at in range(0, len(block), 4096):
            block[at] = 1
        try:
            assert before > 0
            assert resident_bytes() >= before + (32 << 20)
        finally:
            del block


class TestNativeThreads:
    def test_native_threads_should_count_a_thread_while_it_runs(self):
        """Test that a running thread counts (the fork guard depends on it), and stops counting once joined.

        In a fresh interpreter of its own: this process's other threads (a test's executor winding down)
        come and go meanwhile.
        """
        code = (
            "import threading\n"
            "from pool._base._process import native_threads\n"
            "alone = native_threads()\n"
            "started, release = threading.Event(), threading.Event()\n"
            "thread = threading.Thread(target=lambda: (started.set(), release.wait(30)))\n"
            "thread.start(); started.wait(30)\n"
            "running = native_threads()\n"
            "release.set(); thread.join(30)\n"
            "import time; deadline = time.monotonic() + 30\n"
            "while native_threads() > 1 and time.monotonic() < deadline: time.sleep(0.001)\n"  # (3.12+: join returns
            "print(alone, running, native_threads())\n"  # a moment before the kernel lets the thread go)
        )
        out = subprocess.run(python(code), capture_output=True, text=True, timeout=WAIT_S, check=True).stdout
        assert out.split() == ["1", "2", "1"]


class TestWatchExit:
    async def test_watch_exit_should_resolve_with_the_status_and_reap_a_popen_child(self):
        """Test that the future settles with the exit status and the child is reaped (no zombie)."""
        process = subprocess.Popen(python("import sys; sys.exit(3)"))
        try:
            assert await asyncio.wait_for(watch_exit(process), WAIT_S) == 3
            assert process.returncode == 3
        finally:
            process.kill()
            process.wait()

    async def test_watch_exit_should_resolve_with_the_signal_of_a_killed_forked_child(self):
        """Test that a `ForkedChild` killed while watched settles its future with -9."""
        pid = spawn("sleep", "60")
        child = ForkedChild(pid)
        try:
            exited = watch_exit(child)
            assert not exited.done()
            child.kill()
            assert await asyncio.wait_for(exited, WAIT_S) == -signal.SIGKILL
        finally:
            reap(pid)

    async def test_watch_exit_should_still_resolve_when_the_process_is_gone_already(self):
        """Test that a child whose pid no longer exists (no pidfd to open) is waited for another way."""
        pid = spawn("true")
        child = ForkedChild(pid)
        try:
            assert child.wait() == 0  # reaped: its pid is free, so pidfd_open fails
            assert await asyncio.wait_for(watch_exit(child), WAIT_S) == 0
        finally:
            reap(pid)
