"""`Child`: a subprocess a test starts, read and waited on without forking from the loop.

Tests run on uvloop, whose subprocess support forks and runs Python's
after-fork handlers in the child; in a process with threads that can hang.
`subprocess.Popen` (vfork + exec in C) cannot, so tests start children
with it, watch the exit like the pool does (a pidfd), and always reap.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from typing import Any, Self

from pool._base._process import watch_exit as _watch_exit


class Child:
    """``async with Child([...], stderr=PIPE) as child:`` — killed and reaped on exit."""

    def __init__(self, args: list[str], **popen: Any) -> None:
        self.args = args
        self.popen = popen
        self.process: subprocess.Popen[bytes] | None = None
        self._exited: asyncio.Future[int] | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []

    async def __aenter__(self) -> Self:
        self.process = subprocess.Popen(self.args, **self.popen)
        self._exited = _watch_exit(self.process)
        loop = asyncio.get_running_loop()
        for name in ("stdout", "stderr"):
            pipe = getattr(self.process, name)
            if pipe is not None:
                reader = asyncio.StreamReader()
                transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
                self._transports.append(transport)
                setattr(self, name, reader)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
        try:
            await self.wait(30)
        finally:
            for transport in self._transports:
                transport.close()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def signal(self, sig: int) -> None:
        assert self.process is not None
        self.process.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        assert self._exited is not None
        return await asyncio.wait_for(asyncio.shield(self._exited), timeout)


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def parent_of(pid: int) -> int:
    """The parent pid of process ``pid`` (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


async def run_script(args: list[str], timeout: float = 120) -> tuple[bytes, bytes]:
    """Run ``args`` as a Child to the end; its (stdout, stderr). Fails the test if it does not exit 0."""
    async with Child(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        out = await asyncio.wait_for(child.stdout.read(), timeout)
        err = await asyncio.wait_for(child.stderr.read(), timeout)
        assert await child.wait(60) == 0, err.decode()
    return out, err
