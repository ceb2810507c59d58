"""Issue 43, bounded reads: nothing an unauthenticated caller sends is read in full, and a caller holding the
secret still cannot make a worker map what it likes and a standalone --unix-socket
worker serves its own user only (split from test_trust.py, which plays the other findings).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import struct
import subprocess
import uuid

import grpc
import pytest

import pool
from pool._transport._rpc import SERVICE
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.strangers import (
    AS_NOBODY,
    NOBODY,
    UNIX_CLIENT,
    needs_root,
    run_as_nobody,
    shared_directory,
)
from tests.integration.support.workers import static, worker

pytestmark = pytest.mark.integration

LOWEST = uuid.UUID(int=1)
"""A planted record's uid: PriorityLoadBalancer offers it first."""

WAIT_S = 30.0
"""Bound on every wait for something to happen."""


# -- 2. an unauthenticated request is not read in full -----------------------------------------------------


def peak_rss(pid: int) -> int:
    """A process's peak resident memory so far (VmHWM), bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


HUGE = 300 << 20
"""The size of the unauthenticated requests (the issue's was 400 MB: the worker peaked at 1.28 GB)."""


async def curl_as_nobody(port: int) -> None:
    """``nobody`` sends a 300 MB State request to 127.0.0.1:``port`` with curl (no handshake: none is possible)."""
    header = "".join(f"\\{byte:03o}" for byte in struct.pack(">BI", 0, HUGE))  # a gRPC message's 5 bytes
    curl = (
        f"{{ printf '{header}'; head -c {HUGE} /dev/zero; }} | curl -sS --http2-prior-knowledge "
        "-H 'content-type: application/grpc' -H 'te: trailers' --data-binary @- -D - -o /dev/null "
        f"http://127.0.0.1:{port}/{SERVICE}/State"
    )
    async with Child([*AS_NOBODY, "sh", "-c", curl], stdout=subprocess.PIPE) as c:
        out = (await asyncio.wait_for(c.stdout.read(), 120)).decode()
        await c.wait(60)
    assert "grpc-status: 0" not in out, out  # refused (the stream reset at the announced length), not answered


async def grpc_as_this_user(port: int) -> None:
    """This user (so past the uid check) sends a 300 MB first message on a Dispatch stream, without a handshake."""
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        call = channel.stream_stream(f"/{SERVICE}/Dispatch")()
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError):
            await call.write(bytes(HUGE))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await asyncio.wait_for(call.read(), 60)
        assert info.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def unix_as_this_user(path: str) -> None:
    """This user sends a hello, then a 300 MB "challenge", on a worker's unix socket."""
    reader, writer = await asyncio.open_unix_connection(path)
    hello = b"leakypool-local/2 Dispatch"
    writer.write(struct.pack(">I", len(hello)) + hello + struct.pack(">I", HUGE))
    answered = b""
    with contextlib.suppress(ConnectionError):
        for _ in range(HUGE // (1 << 20)):
            writer.write(bytes(1 << 20))
            await asyncio.wait_for(writer.drain(), 60)
        answered = await asyncio.wait_for(reader.read(), 60)
    writer.close()
    assert answered == b""  # cut off at the announced length (the connection reset): nothing answered


@needs_root
async def test_a_300_mb_unauthenticated_request_should_not_raise_a_workers_peak_memory():
    """Test that 300 MB sent before any proof (by ``nobody`` with curl to State; by this user to Dispatch over
    gRPC and over a unix socket) is refused at its announced length: each raises the worker's peak memory by a
    few MiB at most (the issue's 400 MB State: 1.28 GB), and the worker still serves."""
    with shared_directory() as shared:
        path = os.path.join(shared, "w.sock")
        grown: dict[str, int] = {}
        async with worker("--port", "0") as w, worker("--unix-socket", path) as u:
            for address in (f"127.0.0.1:{w.port}", f"unix:{path}"):  # warmed up: a call of each kind served once
                async with pool.WorkerPool(discovery=static(w if address[0] == "1" else u, address)) as p:
                    await p.wait_for_workers(1, timeout=WAIT_S)
                    assert await routines.add(1, 2) == 3
                    assert len(await p.worker_states(timeout=WAIT_S)) == 1
            for name, pid, send in (
                ("curl as nobody", w.pid, lambda: curl_as_nobody(w.port)),
                ("gRPC as this user", w.pid, lambda: grpc_as_this_user(w.port)),
                ("unix socket as this user", u.pid, lambda: unix_as_this_user(path)),
            ):
                before = peak_rss(pid)
                await send()
                grown[name] = peak_rss(pid) - before
            async with pool.WorkerPool(discovery=static(w)) as p:
                await p.wait_for_workers(1, timeout=WAIT_S)
                assert await routines.add(1, 2) == 3  # and it still serves
    assert max(grown.values()) < 6 << 20, grown


# -- 5. a peer that holds the secret still cannot make a worker map what it likes ---------------------------


def mapped_bytes(pid: int) -> int:
    """A process's address space (VmSize), bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize")


async def test_a_chunk_of_a_terabyte_or_regions_without_end_should_end_the_stream_not_map_them():
    """Test that a caller who proved the secret (a raw gRPC client) announcing a 2**40-byte region, or opening
    200 regions, gets its stream ended (INVALID_ARGUMENT) with nothing of the kind mapped, and the worker goes on."""
    from pool._transport._pieces import pieces
    from pool._transport._proto import leakypool_pb2 as pb
    from tests.integration.support.raw import grpc_dial

    def chunks(*specs: tuple[int, int]) -> bytes:
        frames = [pb.Frame(id=0, chunk=pb.Chunk(token=t, size=s, offset=0, data=b"x")) for t, s in specs]
        return next(pieces(pb.Frames(frames=frames).SerializeToString()))

    async with worker("--port", "0") as w, grpc.aio.insecure_channel(f"127.0.0.1:{w.port}") as channel:
        before = mapped_bytes(w.pid)
        for message in (chunks((1, 1 << 40)), chunks(*((t, 4096) for t in range(200)))):
            call = await grpc_dial(channel)
            await call.write(message)
            with pytest.raises(grpc.aio.AioRpcError) as info:
                while await asyncio.wait_for(call.read(), WAIT_S) is not grpc.aio.EOF:
                    pass
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, info.value
        assert mapped_bytes(w.pid) - before < 1 << 30  # not the terabyte (nor 200 regions left open)
        async with pool.WorkerPool(discovery=static(w)) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            assert await routines.add(1, 2) == 3


# -- 4. a standalone --unix-socket worker serves its own user only -------------------------------------------


@needs_root
async def test_a_unix_socket_worker_started_under_umask_000_should_give_another_user_nothing(caplog):
    """Test that the socket is 0600 whatever the umask (``nobody`` cannot even connect), and that a peer of
    another uid is turned away before its first message is read when the socket is opened up anyway."""
    with shared_directory() as shared:
        path = os.path.join(shared, "w.sock")
        umask = ["sh", "-c", 'umask 000; exec "$@"', "sh"]
        async with worker("--unix-socket", path, wrap=lambda a: [*umask, *a], stderr=subprocess.PIPE) as w:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            out = os.path.join(shared, "client.out")
            assert await run_as_nobody(shared, "client.py", UNIX_CLIENT, path, out) == 0
            with open(out) as f:
                assert f.read() == "connect: Permission denied"
            os.chmod(path, 0o666)  # noqa: S103 - opened up (by mistake, or by an older release): the peer check still holds
            assert await run_as_nobody(shared, "client.py", UNIX_CLIENT, path, out) == 0
            with open(out) as f:
                assert f.read() == "ended after "  # not a byte back: no answer, no refusal to learn from
            async with pool.WorkerPool(discovery=static(w, f"unix:{path}")) as p:
                await p.wait_for_workers(1, timeout=WAIT_S)
                assert await routines.add(1, 2) == 3  # its own user is served
            w.child.signal(15)
            err = (await asyncio.wait_for(w.child.stderr.read(), WAIT_S)).decode()
    assert f"runs as uid {NOBODY}" in err
