"""Every worker connection proves the secret both ways, on loopback too (issues 35 and 43).

Real ``worker_main.py`` processes on 127.0.0.1, real gRPC, real pools. The
per-user secret lives in this session's own config directory
(``private_secret`` in tests/conftest.py), never the developer's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys

import grpc
import pytest

import pool
from pool._transport._handshake import Keyring
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import SERVICE
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.raw import grpc_dial
from tests.integration.support.workers import clean_env, static, worker

pytestmark = pytest.mark.integration

NOBODY = 65534
"""The uid and gid of ``nobody``: another local user."""

WORKER_COMMAND = [sys.executable, "worker_main.py", "{worker_args}", "--log-level", "WARNING"]


async def state(address: str, keyring: Keyring | None = None) -> pb.WorkerState:
    """A State call by hand (the handshake with ``keyring``: default, this user's secret), then its answer."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = await grpc_dial(channel, "State", keyring)
        await call.write(b"\0" + pb.StateRequest().SerializeToString())
        reply = await asyncio.wait_for(call.read(), 30)
        if reply is grpc.aio.EOF:
            raise grpc.aio.AioRpcError(
                await call.code(), grpc.aio.Metadata(), grpc.aio.Metadata(), await call.details()
            )
        return pb.WorkerState.FromString(reply[1:])


async def refusal(address: str, keyring: Keyring | None) -> grpc.aio.AioRpcError:
    """The error a handshake with ``keyring`` ends in (None: a caller that sends no challenge at all)."""
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises((grpc.aio.AioRpcError, ConnectionError)) as info:
            if keyring is None:
                call = channel.stream_stream(f"/{SERVICE}/Dispatch")()
                await call.write(b"not a challenge")
                await asyncio.wait_for(call.read(), 30)
                raise grpc.aio.AioRpcError(
                    await call.code(), grpc.aio.Metadata(), grpc.aio.Metadata(), await call.details()
                )
            await state(address, keyring)
    error = info.value
    assert isinstance(error, grpc.aio.AioRpcError) or "refused" in str(error), error
    return error  # type: ignore[return-value]


async def test_a_tcp_worker_should_refuse_a_caller_without_the_secret_and_answer_one_with_it():
    async with worker("--port", "0") as w:
        address = f"127.0.0.1:{w.port}"
        for keyring in (None, Keyring(("not-the-secret",))):
            error = await refusal(address, keyring)
            if isinstance(error, grpc.aio.AioRpcError):
                assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (await state(address)).uid == w.uid


async def test_a_pool_of_the_same_user_should_find_the_secret_by_itself():
    probing = pool.StaticDiscovery  # with addresses: its probe proves the secret too
    async with worker("--port", "0") as w, pool.WorkerPool(discovery=probing([f"127.0.0.1:{w.port}"])) as p:
        await p.wait_for_workers(1, timeout=30)
        assert await routines.pid() == w.pid


async def test_a_pool_with_a_wrong_secret_should_be_refused_and_say_why(caplog):
    caplog.set_level(logging.INFO, logger="leakypool.pool")
    async with worker("--port", "0") as w, pool.WorkerPool(discovery=static(w), secret="wrong") as p:
        await p.wait_for_workers(1, timeout=30)
        with pytest.raises((pool.NoWorkersAvailable, pool.WorkerBroken)):
            await routines.pid()
        lines = [r.getMessage() for r in caplog.records]
        (line,) = [m for m in lines if "failed the handshake" in m] or [lines]
        assert "no secret in common" in line and "lan-security" in line


async def test_the_workers_a_pool_spawns_should_require_its_own_key_not_the_users_secret():
    async with pool.WorkerPool(spawn=1, local_transport="tcp", secret="s3cret-for-this-pool") as p:
        assert await routines.add(1, 2) == 3
        (member,) = p.workers.values()
        for keyring in (None, Keyring(("s3cret-for-this-pool",))):  # the user's secret, the pool's given one
            error = await refusal(member.address, keyring)
            if isinstance(error, grpc.aio.AioRpcError):
                assert error.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_the_secret_should_reach_workers_a_command_provisioner_starts(tmp_path):
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    provisioner = pool.CommandProvisioner(WORKER_COMMAND)
    async with pool.WorkerPool(
        provisioner=provisioner,
        discovery=pool.StoreDiscovery(url, poll_interval=0.2),
        max_workers=1,
        queue_depth=10,
        dispatch_deadline=30,
        secret="provisioned-secret",
    ) as p:
        assert await routines.add(2, 3) == 5  # the worker proves what the pool holds: it came in its env
        (member,) = p.workers.values()
        await refusal(member.address, Keyring(("another-secret",)))
        assert (await state(member.address, Keyring(("provisioned-secret",)))).uid == str(member.uid)


def test_no_secret_should_be_refused_at_start():
    """Test that ``--no-secret`` (issue 35's opt-out) now stops the worker with one line: every connection proves it."""
    result = subprocess.run(
        [sys.executable, "worker_main.py", "--port", "0", "--no-secret"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--no-secret: removed" in result.stderr and len(result.stderr.strip().splitlines()) == 1


RACER = """
import os, sys
os.read(0, 1)  # the start signal: every racer is waiting on it
from pool._transport._secret import load_or_create
print(load_or_create(sys.argv[1]))
"""


async def test_the_secret_file_should_be_private_and_made_once_by_racing_processes(tmp_path):
    path = tmp_path / "config" / "leakypool" / "secret"
    racers = 8
    read_fd, write_fd = os.pipe()
    children = [
        Child([sys.executable, "-c", RACER, str(path)], stdin=read_fd, stdout=subprocess.PIPE, env=clean_env())
        for _ in range(racers)
    ]
    try:
        for child in children:
            await child.__aenter__()
        os.write(write_fd, b"x" * racers)  # all at once
        tokens = {(await asyncio.wait_for(child.stdout.readline(), 60)).decode().strip() for child in children}
    finally:
        os.close(read_fd)
        os.close(write_fd)
        for child in children:
            await child.__aexit__(None, None, None)
    assert len(tokens) == 1 and len(tokens.pop()) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert os.listdir(path.parent) == ["secret"]  # no temporary file left behind


def grpc_by_curl(host: str, port: int, method: str) -> list[str]:
    """A gRPC call made by curl (HTTP/2 without TLS), its body from stdin: what any local user can run, no Python needed."""
    args = ["curl", "-sS", "--http2-prior-knowledge", "-H", "content-type: application/grpc", "-H", "te: trailers"]
    return [*args, "--data-binary", "@-", "-D", "-", "-o", "/dev/null", f"http://{host}:{port}/{SERVICE}/{method}"]


async def run_as(user: int | None, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
    """Run ``args`` as ``user`` (None: as this process; else through runuser); its exit status and output."""
    command = args if user is None else ["runuser", "-u", pwd.getpwuid(user).pw_name, "--", *args]
    async with Child(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env()
    ) as child:
        child.process.stdin.write(stdin)
        child.process.stdin.close()
        out = await asyncio.wait_for(child.stdout.read(), 60)
        return await child.wait(60), out.decode()


EMPTY_BODY = b""
"""What curl sends: nothing; the worker's door closes a connection of an untrusted uid as it accepts it."""


@pytest.mark.skipif(os.getuid() != 0, reason="becoming another user (nobody) needs root; this run is not root")
@pytest.mark.skipif(
    shutil.which("curl") is None,
    reason="needs curl (the other user's client: it cannot run this interpreter, under /root)",
)
@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
async def test_another_user_should_neither_read_the_secret_nor_reach_the_worker(private_secret, host):
    """Test that ``nobody`` can neither read the owner's secret nor get an answer (issue 35: it ran code as root).

    The other user's client is curl speaking gRPC: this interpreter lives
    where ``nobody`` may not run it. The owner's own State, with the
    handshake, is the control.
    """
    async with worker("--host", host.strip("[]"), "--port", "0") as w:
        status, out = await run_as(NOBODY, ["cat", private_secret])
        assert status != 0 and "Permission denied" in out
        for method in ("State", "Dispatch", "Stop"):
            status, out = await run_as(NOBODY, grpc_by_curl(host, w.port, method), EMPTY_BODY)
            # Turned away for who it is (IPv6 too) as its connection is accepted: not a byte of HTTP/2 back.
            assert status != 0 and "HTTP/2" not in out and "grpc-status" not in out, (status, out)
        assert (await state(f"{host}:{w.port}")).uid == w.uid
