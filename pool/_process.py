"""Watching a child process's exit on the event loop, without a thread (a pidfd where the kernel has one)."""

from __future__ import annotations

import asyncio
import os
import subprocess


def watch_exit(process: subprocess.Popen[bytes]) -> asyncio.Future[int]:
    """A future for ``process``'s exit status; it is reaped as soon as it exits."""
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[int] = loop.create_future()
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfd (old kernel, not Linux): a thread waits instead
        task = asyncio.ensure_future(asyncio.to_thread(process.wait))
        task.add_done_callback(lambda t: exited.done() or exited.set_result(t.result()))
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
