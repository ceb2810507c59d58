"""Child processes on the event loop: watching their exit without a thread, and forking only when it is safe."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from typing import Protocol


class Child(Protocol):
    """What `watch_exit` needs of a child: `subprocess.Popen`, or a `ForkedChild`."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...


class ForkedChild:
    """A child this process ``fork()``ed (no exec), with the part of `subprocess.Popen` we use."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its exit status if it exited (reaping it), else None; -1 if someone else reaped it."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1  # reaped elsewhere (SIGCHLD ignored, a waitpid(-1) watcher)
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        """Block until it exits; its exit status (-1 if someone else reaped it)."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = -1
            else:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        """SIGKILL it, unless it was reaped already (its pid may be someone else's by now)."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def descriptors() -> dict[int, tuple[int, int]]:
    """This process's open file descriptors, each with its file's identity (device, inode)."""
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            stat = os.fstat(int(name))
        except OSError:
            continue  # the listing's own descriptor, closed by now
        found[int(name)] = (stat.st_dev, stat.st_ino)
    return found


def resident_bytes() -> int:
    """This process's resident memory (RSS); 0 where /proc is missing."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def native_threads() -> int:
    """Threads of this process as the kernel sees them (C libraries' too); 1 where /proc is missing.

    ``fork()`` copies only the calling thread: a lock another thread held
    stays locked in the child forever. So we fork only when this is 1.
    """
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def watch_exit(process: Child | subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future for ``process``'s exit status; it is reaped as soon as it exits."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): a thread waits instead
        task = asyncio.ensure_future(asyncio.to_thread(process.wait))

        def settle(waited: asyncio.Future[int]) -> None:
            if not exited.done():
                exited.set_result(waited.result())

        task.add_done_callback(settle)
        return exited

    def readable() -> None:
        code = process.poll()
        if code is None:
            return
        loop.remove_reader(pidfd)
        os.close(pidfd)
        if not exited.done():
            exited.set_result(code)

    loop.add_reader(pidfd, readable)
    return exited
