"""worker_main.py as an operator runs it: flags, variables, errors, start and stop."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile

import pytest

from pool._config._settings import WORKER_SETTINGS
from tests.integration.support.child import Child
from tests.integration.support.workers import static, worker

pytestmark = pytest.mark.integration

WORKER = [sys.executable, "worker_main.py"]

# Any existing file passes the flag check; the security check comes first.
TLS_NO_CLIENT_CA = ["--tls-cert", "README.md", "--tls-key", "README.md"]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKYPOOL_")}
    env.update(extra)
    return env


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(WORKER + args, capture_output=True, text=True, env=clean_env(**env), timeout=60, check=False)


def test_help_should_document_every_flag_and_its_variable():
    result = run(["--help"])
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for setting in WORKER_SETTINGS:
        assert setting.flag in text, setting.flag
        assert setting.env in text, setting.env


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--port", "x"], {}, "--port: expected an integer in 0..65535, got 'x'"),
        (["--max-concurrent-tasks", "-2"], {}, "--max-concurrent-tasks: expected an integer >= 0, got '-2'"),
        ([], {"LEAKYPOOL_IDLE_TIMEOUT": "later"}, "LEAKYPOOL_IDLE_TIMEOUT: expected seconds >= 0, got 'later'"),
        (["--discovery", "dns"], {}, "--discovery: expected one of none, lan, local, got 'dns'"),
        (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
        (["--host", "0.0.0.0"], {}, "--host 0.0.0.0: a worker off loopback runs code for anyone who reaches it"),
        (
            ["--host", "0.0.0.0", *TLS_NO_CLIENT_CA],
            {},
            "TLS without --tls-client-ca lets any client that can connect run code",
        ),
        (
            ["--host", "0.0.0.0", "--insecure", "--registry", "sqlite:///unused.db"],
            {},
            "--registry: --host 0.0.0.0 binds every address and records none a pool can dial; give --advertise",
        ),
        (["--host", "::", "--insecure"], {"LEAKYPOOL_REGISTRY": "sqlite:///unused.db"}, "give --advertise ADDRESS"),
        (["--max-memory", "12XB"], {}, "--max-memory: expected a size in bytes (e.g. 536870912, 512MiB"),
        ([], {"LEAKYPOOL_MAX_TASKS": "-1"}, "LEAKYPOOL_MAX_TASKS: expected an integer >= 0, got '-1'"),
        (["--initializer", "no module"], {}, "--initializer: expected module:function, got 'no module'"),
        (
            ["--initializer", "tests.integration.no_such_module:f"],
            {},
            "--initializer tests.integration.no_such_module:f: cannot import it: ModuleNotFoundError",
        ),
        (["--initializer", "tests.integration.routines.recycle_routines:CONFIG"], {}, "expected a callable, got {}"),
    ],
)
def test_bad_value_should_exit_2_with_one_line_naming_it(args, env, message):
    result = run(args, **env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("leakypool-worker: error: ")
    assert message in lines[0]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_worker_should_log_ready_and_exit_0_with_its_reason_on_a_signal(sig):
    args = [*WORKER, "--port", "0", "--max-concurrent-tasks", "3", "--tags", "blue"]
    async with Child(args, stderr=subprocess.PIPE, env=clean_env()) as child:
        line = (await asyncio.wait_for(child.stderr.readline(), 60)).decode()
        assert re.search(r"ready: uid=[0-9a-f-]{36} address=127\.0\.0\.1:\d+ capacity=3 tls=False tags=blue", line), (
            line
        )
        child.signal(sig)
        rest = (await asyncio.wait_for(child.stderr.read(), 60)).decode()
        assert await child.wait(60) == 0
        assert f"exited: {sig.name}" in rest


async def test_undecodable_frames_should_end_the_stream_with_invalid_argument_and_spare_the_worker():
    """Test that bytes that are not our protocol, from a dialler that proved itself, close that stream with an
    error status (not OK)."""
    import grpc

    import pool
    from tests.integration.routines import common as routines
    from tests.integration.support.raw import grpc_dial

    async with worker("--port", "0") as w, pool.WorkerPool(discovery=static(w)) as p:
        await p.wait_for_workers(1, timeout=30)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{w.port}") as channel:
            stream = await grpc_dial(channel)
            await stream.write(b"\0\xff\xff\xff\xff")  # a whole message (one piece) that is not Frames
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await asyncio.wait_for(stream.read(), 30)
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "undecodable frames" in (info.value.details() or "")
        assert await routines.add(1, 2) == 3  # the worker and the pool's own stream carry on


async def test_undecodable_frames_on_a_unix_socket_should_end_that_connection_and_spare_the_worker():
    """Test that a framed Dispatch stream carrying bytes that are not `Frames` is closed (and logged), nothing else."""
    import struct

    import pool
    from tests.integration.routines import common as routines
    from tests.integration.support.raw import unix_dial

    directory = tempfile.TemporaryDirectory(prefix="lp-")
    path = os.path.join(directory.name, "w.sock")
    async with (
        worker("--unix-socket", path) as w,
        pool.WorkerPool(discovery=static(w, f"unix:{path}")) as p,
    ):
        await p.wait_for_workers(1, timeout=30)
        reader, writer = await unix_dial(path)
        try:
            message = b"\xff\xff\xff\xff"
            writer.write(struct.pack(">I", len(message)) + message)
            assert await asyncio.wait_for(reader.read(), 30) == b""  # closed, with nothing sent back
        finally:
            writer.close()
        assert await routines.add(1, 2) == 3  # the worker and the pool's own stream carry on
    directory.cleanup()


def test_raising_initializer_should_exit_3_with_its_traceback_logged():
    """Test that a standalone worker whose --initializer raises never serves: status 3, the traceback in its log."""
    result = run(["--initializer", "tests.integration.routines.recycle_routines:refuse"])
    assert result.returncode == 3
    assert "the initializer raised" in result.stderr
    assert "ModelMissing: refusing to start" in result.stderr
    assert "READY" not in result.stdout
