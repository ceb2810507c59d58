"""A worker on TCP runs calls only for callers that present its secret, on loopback too (issue 35).

Real ``worker_main.py`` processes on 127.0.0.1, real gRPC, real pools. The
per-user secret lives in this session's own config directory
(``private_secret`` in tests/conftest.py), never the developer's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import subprocess
import sys
import uuid

import grpc
import pytest

import pool
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._secret import METADATA_KEY
from tests.integration import routines
from tests.integration.child import Child
from tests.integration.workers import clean_env, secret_metadata, worker

pytestmark = pytest.mark.integration

NOBODY = 65534
"""The uid and gid of ``nobody``: another local user."""

WORKER_COMMAND = [sys.executable, "worker_main.py", "{worker_args}", "--log-level", "WARNING"]


async def state(address: str, metadata: tuple[tuple[str, str], ...] | None) -> pb.WorkerState:
    """A raw State call (no leakypool client code), with ``metadata``."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.unary_unary(
            "/leakypool.v1.Worker/State",
            request_serializer=pb.StateRequest.SerializeToString,
            response_deserializer=pb.WorkerState.FromString,
        )
        return await call(pb.StateRequest(), metadata=metadata, timeout=30)


def static(w) -> pool.StaticDiscovery:
    """A discovery announcing the standalone worker ``w`` as it is (no probe)."""
    return pool.StaticDiscovery(workers=[pool.WorkerMetadata(uid=uuid.UUID(w.uid), address=f"127.0.0.1:{w.port}")])


async def test_a_tcp_worker_should_refuse_a_raw_caller_without_the_secret_and_answer_one_with_it():
    async with worker("--port", "0") as w:
        address = f"127.0.0.1:{w.port}"
        for metadata in (None, ((METADATA_KEY, "not-the-secret"),)):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await state(address, metadata)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
            assert "secret" in (info.value.details() or "")
        async with grpc.aio.insecure_channel(address) as channel:  # the stream that would carry code: refused too
            stream = channel.stream_stream("/leakypool.v1.Worker/Dispatch")(metadata=None)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(stream.read(), 30)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (await state(address, secret_metadata())).uid == w.uid


async def test_a_pool_of_the_same_user_should_find_the_secret_by_itself():
    probing = pool.StaticDiscovery  # with addresses: its State probe needs the secret too
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
        (line,) = [m for m in lines if "refused this pool" in m] or [lines]
        assert "requires a secret" in line and "presented a wrong secret" in line and "LEAKYPOOL_SECRET" in line


async def test_an_explicit_secret_should_reach_the_workers_a_pool_starts_over_tcp():
    async with pool.WorkerPool(spawn=1, local_transport="tcp", secret="s3cret-for-this-pool") as p:
        assert await routines.add(1, 2) == 3
        (member,) = p.workers.values()
        with pytest.raises(grpc.aio.AioRpcError) as info:  # it requires the pool's secret, not the user's own
            await state(member.address, secret_metadata())
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert (await state(member.address, ((METADATA_KEY, "s3cret-for-this-pool"),))).uid == str(member.uid)


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
        assert await routines.add(2, 3) == 5  # the worker requires what the pool presents: it came in its env
        (member,) = p.workers.values()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await state(member.address, secret_metadata())
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_no_secret_should_let_any_caller_in():
    async with worker("--port", "0", "--no-secret") as w:
        assert (await state(f"127.0.0.1:{w.port}", None)).uid == w.uid


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


def grpc_by_curl(port: int, method: str, headers: tuple[str, ...] = ()) -> list[str]:
    """A gRPC call made by curl (HTTP/2 without TLS), its body from stdin: what any local user can run, no Python needed."""
    args = ["curl", "-sS", "--http2-prior-knowledge", "-H", "content-type: application/grpc", "-H", "te: trailers"]
    for header in headers:
        args += ["-H", header]
    return [
        *args,
        "--data-binary",
        "@-",
        "-D",
        "-",
        "-o",
        "/dev/null",
        f"http://127.0.0.1:{port}/leakypool.v1.Worker/{method}",
    ]


async def run_as(user: int | None, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
    """Run ``args`` as ``user`` (None: as this process); its exit status and stdout + stderr."""
    as_user = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    async with Child(
        args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=clean_env(), **as_user
    ) as child:
        child.process.stdin.write(stdin)
        child.process.stdin.close()
        out = await asyncio.wait_for(child.stdout.read(), 60)
        return await child.wait(60), out.decode()


EMPTY_MESSAGE = b"\0\0\0\0\0"
"""A gRPC message frame holding an empty protobuf (an empty StateRequest)."""

BODIES = {"State": EMPTY_MESSAGE, "Dispatch": b""}
"""What curl sends: a unary call is answered once its request is in; a stream with an empty
body ends its upload at once, so the worker's refusal cannot race it."""


@pytest.mark.skipif(os.getuid() != 0, reason="becoming another user (nobody) needs root; this run is not root")
@pytest.mark.skipif(
    shutil.which("curl") is None,
    reason="needs curl (the other user's client: it cannot run this interpreter, under /root)",
)
async def test_another_user_should_neither_read_the_secret_nor_reach_the_worker(private_secret):
    """Test that ``nobody`` can neither read the owner's secret nor get an answer (issue 35: it ran code as root).

    The other user's client is curl speaking gRPC: this interpreter lives
    where ``nobody`` may not run it. The owner's same call, with the secret,
    is the control.
    """
    async with worker("--port", "0") as w:
        status, out = await run_as(NOBODY, ["cat", private_secret])
        assert status != 0 and "Permission denied" in out
        for method, body in BODIES.items():
            status, out = await run_as(NOBODY, grpc_by_curl(w.port, method), body)
            assert "grpc-status: 16" in out, (status, out)  # UNAUTHENTICATED
        mine = f"{METADATA_KEY}: {secret_metadata()[0][1]}"
        _, out = await run_as(None, grpc_by_curl(w.port, "State", (mine,)), EMPTY_MESSAGE)
        assert "grpc-status: 0" in out, out
