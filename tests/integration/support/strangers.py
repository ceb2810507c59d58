"""Another local user (``nobody``) as a party to the tests of issue 43: its scripts, and running them.

The scripts use the standard library only and run under the system's
``python3``: the venv's interpreter lives where ``nobody`` may not go. They
are written to a directory ``nobody`` may read, with their logs beside
them; `Stranger` starts one as ``nobody`` and reaps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest

from tests.integration.support.child import Child

NOBODY = 65534
"""The uid and gid of ``nobody``."""

PYTHON = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
"""An interpreter ``nobody`` may run (the system's)."""

needs_root = pytest.mark.skipif(os.getuid() != 0, reason="becoming another user (nobody) needs root")

AS_NOBODY = ["runuser", "-u", "nobody", "--"]
"""How a command runs as ``nobody``: runuser, exec'd as any command is (``Popen(user=...)`` has to fork
instead, running gRPC's fork handlers in a process with gRPC threads, which can crash the child)."""

RELAY = r"""
import socket, sys, threading
target, log = int(sys.argv[1]), sys.argv[2]
listen_ip, target_ip = (sys.argv[3:5] + ["127.0.0.1", "127.0.0.1"][len(sys.argv[3:5]):])
find, put = (arg.encode() for arg in (sys.argv[5:7] or ["", ""]))
listener = socket.socket()
listener.bind((listen_ip, 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
lock = threading.Lock()

def pump(src, dst, tag):
    while True:
        try:
            data = src.recv(65536)
        except OSError:
            data = b""
        if not data:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            return
        if log != "-":
            with lock, open(log, "ab") as f:
                f.write(tag + data)
        if find and tag == b"\n>>":
            data = data.replace(find, put)
        try:
            dst.sendall(data)
        except OSError:
            return

while True:
    client, _ = listener.accept()
    upstream = socket.create_connection((target_ip, target))
    threading.Thread(target=pump, args=(client, upstream, b"\n>>"), daemon=True).start()
    threading.Thread(target=pump, args=(upstream, client, b"\n<<"), daemon=True).start()
"""
"""A TCP relay: ``TARGET LOG [LISTEN_IP TARGET_IP [FIND PUT]]``. Listens on LISTEN_IP (127.0.0.1), forwards to
TARGET_IP:TARGET (127.0.0.1), logs every byte both ways to LOG (``>>`` from the dialler; ``-``: no log), and
replaces FIND with PUT in what the dialler sends (none: a transparent relay)."""

LISTENER = r"""
import socket, sys, threading
log, reply = sys.argv[1], bytes.fromhex(sys.argv[2])
listener = socket.socket()
listener.bind(("127.0.0.1", 0))
listener.listen()
print(listener.getsockname()[1], flush=True)

def serve(conn):
    conn.sendall(reply)
    while True:
        data = conn.recv(65536)
        if not data:
            return
        with open(log, "ab") as f:
            f.write(data)

while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""
"""A fake worker: a TCP listener that sends REPLY to whoever connects and logs every byte it receives."""

UNIX_CLIENT = r"""
import socket, struct, sys
path, out = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(path)
except OSError as exc:
    open(out, "w").write(f"connect: {exc.strerror}")
    sys.exit(0)
hello = b"leakypool-local/2 Dispatch"
challenge = b"LPC1" + bytes(32) + b"\x01" + bytes(8)
try:
    s.sendall(struct.pack(">I", len(hello)) + hello + struct.pack(">I", len(challenge)) + challenge)
except OSError:  # turned away before it could send (the worker may hang up at once)
    pass
s.settimeout(30)
got = b""
while True:
    try:
        data = s.recv(65536)
    except OSError:  # reset
        data = b""
    if not data:
        break
    got += data
open(out, "w").write("ended after " + got.hex())
"""
"""A dialler of a unix socket without the secret: its hello and a challenge, then what came back, in OUT."""


@contextlib.contextmanager
def shared_directory() -> Iterator[str]:
    """A directory ``nobody`` may read and write (its scripts and logs), removed afterwards."""
    path = tempfile.mkdtemp(prefix="lp-strangers-")
    os.chmod(path, 0o1777)  # noqa: S103 - shared with nobody on purpose: the other party's scripts and logs
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def script(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o644)
    return path


@contextlib.asynccontextmanager
async def stranger(directory: str, name: str, text: str, *args: str) -> AsyncIterator[tuple[Child, str]]:
    """Run a script as ``nobody``; yield it and the first line it printed (a port); kill and reap it after."""
    path = script(directory, name, text)
    child = Child(
        [*AS_NOBODY, PYTHON, path, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        cwd=directory,
        start_new_session=True,  # its own process group: runuser and the script under it end together
    )
    async with child:
        try:
            line = (await asyncio.wait_for(child.stdout.readline(), 30)).decode().strip()
            yield child, line
        finally:
            # SIGKILL to runuser alone would leave its child running (it cannot forward that signal).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            await _gone(child.pid)


async def _gone(group: int) -> None:
    """Wait (bounded) until no process of process group ``group`` is left (init reaps the script)."""
    async with asyncio.timeout(30):
        while any(_in_group(pid, group) for pid in os.listdir("/proc") if pid.isdigit()):
            await asyncio.sleep(0.02)


def _in_group(pid: str, group: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(fields[2]) == group and fields[0] != "Z"


async def run_as_nobody(directory: str, name: str, text: str, *args: str) -> int:
    """Run a script as ``nobody`` to its end (at most 60 s); its exit status."""
    path = script(directory, name, text)
    async with Child([*AS_NOBODY, PYTHON, path, *args], cwd=directory) as child:
        return await child.wait(60)
