"""Issue 43: a pool talks only to workers that prove who they are, and nothing another user sends is read before that.

Each test plays a finding of the issue with a real second party: ``nobody``
(another local user, running the standard library's python: see
`tests.integration.support.strangers`), a fake worker process that logs what it
receives (`tests.integration.support.impostor`), or a raw client. The genuine
worker still serves in each.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import stat
import subprocess
import sys
import time
import uuid

import pytest

import pool
from balancer import PriorityLoadBalancer
from pool._config._places import default_registry, default_secret_file
from pool._discovery._registry import seal_record
from pool._transport._seal import Seal
from pool._transport._secret import load_or_create
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.strangers import (
    LISTENER,
    NOBODY,
    RELAY,
    needs_root,
    run_as_nobody,
    shared_directory,
    stranger,
)
from tests.integration.support.workers import static, worker

pytestmark = pytest.mark.integration

LOWEST = uuid.UUID(int=1)
"""A planted record's uid: PriorityLoadBalancer offers it first."""

WAIT_S = 30.0
"""Bound on every wait for something to happen."""


def secret() -> str:
    """This user's secret (the session's own: see ``private_secret``)."""
    return load_or_create(default_secret_file())


async def until(predicate, what: str) -> None:
    """Wait (polling, bounded by `WAIT_S`) until ``predicate()`` holds."""
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.02)


def logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


@contextlib.asynccontextmanager
async def impostor(directory):
    """A fake gRPC worker (`tests.integration.support.impostor`); yields its address, its log and its marker file."""
    log, marker = str(directory / "impostor.log"), str(directory / "ran")
    child = Child([sys.executable, "-m", "tests.integration.support.impostor", log, marker], stdout=subprocess.PIPE)
    async with child:
        port = int((await asyncio.wait_for(child.stdout.readline(), WAIT_S)).decode())
        yield f"127.0.0.1:{port}", log, marker


def impostor_log(log: str) -> list[dict]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [json.loads(line) for line in f]


def copy_row(url: str, of: str, *, sealed: bool, **changes: object) -> None:
    """Copy worker ``of``'s registry row with ``changes`` to its record.

    Unsealed, it is what anyone who can write the table can do (issue 51: such a row is never admitted).
    Sealed with the user's secret, it stands for a record a holder of the secret wrote that points at the wrong
    place (a stale or mistaken one): the handshake is what stops it then (issue 43).
    """
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db, db:
        (stored,) = db.execute("SELECT record FROM leakypool_workers WHERE uid = ?", (of,)).fetchone()
        data = json.loads(stored.split(" ", 2)[2]) | changes
        record = json.dumps(data)
        if sealed:
            record = seal_record(Seal(lambda: (secret(),), "the user's secret"), data["uid"], record)
        db.execute(
            "INSERT OR REPLACE INTO leakypool_workers (uid, record, expires_at) VALUES (?, ?, ?)",
            (data["uid"], record, time.time() + 3600),
        )


# -- 1. a planted record gets no call, no secret, and nothing it returns is unpickled -------------------


async def test_a_row_copied_into_a_store_registry_should_get_no_call_no_secret_and_nothing_unpickled(tmp_path, caplog):
    """Test that a fake worker behind a copied registry row (lowest uid: offered first) gets a challenge and
    nothing else, that its pickle is never loaded, and that the genuine worker serves the call."""
    caplog.set_level(logging.INFO, logger="leakypool.pool")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    async with worker("--port", "0", "--registry", url) as w, impostor(tmp_path) as (address, log, marker):
        copy_row(url, w.uid, sealed=True, uid=str(LOWEST), address=address)
        discovery = pool.StoreDiscovery(url, poll_interval=0.1)
        async with pool.WorkerPool(discovery=discovery, loadbalancer=PriorityLoadBalancer()) as p:
            await p.wait_for_workers(2, timeout=WAIT_S)
            assert await routines.add(1, 2) == 3
            assert LOWEST not in p.workers  # tried first, failed the handshake, evicted
            assert await routines.pid() == w.pid
        entries = impostor_log(log)
    messages = [bytes.fromhex(e["data"]) for e in entries if e["kind"] == "message"]
    assert messages and all(m.startswith(b"LPC2") for m in messages)  # challenges, and nothing else
    assert secret() not in json.dumps(entries)  # not in a message, not in the metadata
    assert not os.path.exists(marker)  # what it sent back was never unpickled
    assert logged(caplog, "failed the handshake")


async def test_a_row_written_without_the_secret_should_never_be_admitted_nor_dialled(tmp_path, caplog):
    """Test issue 51: a row copied without the secret (the lowest uid, pointing at a fake worker) is skipped before
    anything is dialled, with one log line, and so is the genuine worker's row rewritten to move it."""
    caplog.set_level(logging.INFO, logger="leakypool.discovery")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    async with (
        worker("--port", "0", "--registry", url, "--registry-ttl", "600") as w,
        impostor(tmp_path) as (
            address,
            log,
            marker,
        ),
    ):
        copy_row(url, w.uid, sealed=False, uid=str(LOWEST), address=address)
        async with pool.WorkerPool(
            discovery=pool.StoreDiscovery(url, poll_interval=0.1), loadbalancer=PriorityLoadBalancer()
        ) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            assert await routines.add(1, 2) == 3
            assert list(p.workers) == [uuid.UUID(w.uid)]
            copy_row(url, w.uid, sealed=False, address=address)  # the genuine row, moved: its seal breaks
            await until(lambda: len(logged(caplog, "skipped")) >= 2, "both rows named")
            await until(lambda: not p.workers, "the member whose row lost its seal gone (a writer can delay calls)")
        assert impostor_log(log) == []  # never dialled
    (first, *_) = logged(caplog, "skipped")
    assert "not sealed with" in first and str(LOWEST) in first
    assert not os.path.exists(marker)


async def test_a_row_that_moves_a_worker_should_not_evict_it_unless_the_new_address_proves_it(tmp_path, caplog):
    """Test that a row naming the genuine worker's uid and another address (once: "moved to", evicted) leaves
    the genuine worker where it is, and calls keep going there."""
    caplog.set_level(logging.INFO, logger="leakypool.pool")
    url = f"sqlite:///{tmp_path / 'registry.db'}"
    async with (
        worker("--port", "0", "--registry", url, "--registry-ttl", "600") as w,
        impostor(tmp_path) as (address, log, marker),
    ):
        async with pool.WorkerPool(discovery=pool.StoreDiscovery(url, poll_interval=0.1)) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            copy_row(url, w.uid, sealed=True, address=address)
            await until(lambda: logged(caplog, "no worker there proved to be it"), "the move refused")
            (member,) = p.workers.values()
            assert member.address == f"127.0.0.1:{w.port}"
            assert await routines.pid() == w.pid
        assert secret() not in json.dumps(impostor_log(log))
        assert not os.path.exists(marker)


PLANT = r"""
import json, os, sys
registry, port = sys.argv[1], int(sys.argv[2])
os.makedirs(registry)
os.chmod(registry, 0o777)
record = {"uid": "00000000-0000-0000-0000-000000000001", "address": f"127.0.0.1:{port}", "pid": 1, "tls": False}
with open(os.path.join(registry, record["uid"] + ".json"), "w") as f:
    json.dump(record, f)
"""
"""``nobody`` makes the default registry first (mode 777) and plants a record for its own fake worker."""


@needs_root
async def test_a_registry_directory_another_user_made_first_should_be_refused_and_its_record_never_dialled(caplog):
    """Test issue 43's local-discovery attack: without XDG_RUNTIME_DIR the registry is in the shared temp dir;
    ``nobody`` made it first and planted a record. The pool reads nothing from it (its fake worker is never
    dialled), the genuine worker refuses to publish there, and both name the path and the fix."""
    caplog.set_level(logging.INFO, logger="leakypool.discovery")
    with shared_directory() as shared:
        tmp = os.path.join(shared, "tmp")
        os.mkdir(tmp)
        os.chmod(tmp, 0o1777)  # noqa: S103 - a /tmp of its own, shared as /tmp is
        registry = default_registry({"TMPDIR": tmp})
        log = os.path.join(shared, "fake.log")
        async with stranger(shared, "fake.py", LISTENER, log, b"not a worker".hex()) as (_, port):
            assert await run_as_nobody(shared, "plant.py", PLANT, registry, port) == 0
            discovery = pool.LocalDiscovery(registry, poll_interval=0.05)
            async with pool.WorkerPool(spawn=1, discovery=discovery, loadbalancer=PriorityLoadBalancer()) as p:
                await until(lambda: logged(caplog, "registry directory"), "the refusal logged")
                assert await routines.add(1, 2) == 3  # the pool's own worker serves
                assert LOWEST not in p.workers
            args = [
                sys.executable,
                "worker_main.py",
                "--port",
                "0",
                "--discovery",
                "local",
                "--local-registry",
                registry,
            ]
            async with Child(args, stderr=subprocess.PIPE) as genuine:
                stderr = (await asyncio.wait_for(genuine.stderr.read(), WAIT_S)).decode()
                status = await genuine.wait(WAIT_S)
            assert not os.path.exists(log) or os.path.getsize(log) == 0  # no one ever connected to the fake
    (line,) = logged(caplog, "registry directory")
    assert registry in line and f"belongs to uid {NOBODY}" in line and "remove it" in line
    assert status == 2 and registry in stderr and f"uid {NOBODY}" in stderr


# -- a relay run by another user between a pool and its own worker -------------------------------------------


@needs_root
@pytest.mark.parametrize("checking", ["worker", "pool"])
async def test_a_relay_run_by_another_user_should_complete_no_call_and_see_no_secret(checking, caplog):
    """Test that a transparent relay run by ``nobody`` between a pool and its own worker gets nowhere, whichever
    end is left to notice: the worker, seeing a peer of uid 65534 (the pool told to trust that uid); or the pool,
    seeing that the socket it dialled is uid 65534's (the worker told to trust it). The handshake alone would let
    a relay pass; its uid does not. No call completes, no routine crosses the relay, nor the secret."""
    caplog.set_level(logging.INFO, logger="leakypool.pool")
    flags = ["--peer-uids", str(NOBODY)] if checking == "pool" else []
    trusting = [NOBODY] if checking == "worker" else []
    with shared_directory() as shared:
        log = os.path.join(shared, "relay.log")
        async with (
            worker("--port", "0", *flags) as w,
            stranger(shared, "relay.py", RELAY, str(w.port), log) as (_, port),
        ):
            relayed = pool.WorkerMetadata(uid=uuid.UUID(w.uid), address=f"127.0.0.1:{port}")
            discovery = pool.StaticDiscovery(workers=[relayed])
            async with pool.WorkerPool(discovery=discovery, peer_uids=trusting) as p:
                await p.wait_for_workers(1, timeout=WAIT_S)
                with pytest.raises((pool.NoWorkersAvailable, pool.WorkerBroken)):
                    await routines.add(1, 2)
            async with pool.WorkerPool(discovery=static(w)) as p:  # the control: straight to the worker, it serves
                await p.wait_for_workers(1, timeout=WAIT_S)
                assert await routines.add(1, 2) == 3
            seen = b""
            if os.path.exists(log):
                with open(log, "rb") as f:
                    seen = f.read()
    # The pool looks at the listener's owner before it sends anything (not even its challenge went); the worker's
    # door closes a connection of an untrusted uid as it accepts it (issue 51), before the challenge arrives.
    assert b"LPC2" not in seen
    assert secret().encode() not in seen
    assert b"tests.integration.routines" not in seen  # no Call frame (it names the routine's module) crossed
    if checking == "pool":
        (line,) = logged(caplog, "failed the handshake")
        assert "the worker at " in line and f"uid {NOBODY}" in line


# -- 3. passwords in job errors, and the files that hold them ------------------------------------------------

URL = "postgresql://app:hunter2@db.internal/app"
"""A password where a failed job's error quotes it (the issue's)."""

READ_FILE = r"""
import sys
try:
    data = open(sys.argv[1], "rb").read()
except OSError as exc:
    data = f"refused: {exc.strerror}".encode()
open(sys.argv[2], "wb").write(data)
"""
"""``nobody`` reads a file (the job store) into OUT, or says why it could not."""

HTTP_GET = r"""
import http.client, json, sys
port, host, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
connection.request("GET", path, headers={"Host": host})
response = connection.getresponse()
with open(out, "w") as f:
    json.dump({"status": response.status, "body": response.read().decode("utf-8", "replace")}, f)
"""
"""``nobody`` asks the observation port for PATH, naming HOST (a web page after DNS rebinding names its own)."""


async def nobody_gets(shared: str, port: int, host: str, path: str = "/status") -> dict:
    out = os.path.join(shared, "http.json")
    assert await run_as_nobody(shared, "get.py", HTTP_GET, str(port), host, path, out) == 0
    with open(out) as f:
        return json.load(f)


def jobs_command(*args: str) -> str:
    """``leakypool jobs ...`` as the operator runs it; its output."""
    env = {**os.environ, "COLUMNS": "200"}
    command = [sys.executable, "-m", "pool._cli._main", "jobs", *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_root
async def test_a_failed_jobs_password_should_reach_no_other_user(caplog):
    """Test that the job store is 0600 (its -wal and -shm too: ``nobody`` reads nothing), that ``/status``
    answers ``nobody``'s request naming a foreign Host (DNS rebinding) with 421 and nothing of the job, that with
    the right Host it shows the error without the password, as ``leakypool jobs`` does; and that the job's own
    error keeps the full text for its owner."""
    with shared_directory() as shared:
        # The store's own directory: this user's, which nobody may enter but not write (a store in the shared,
        # world-writable directory itself is refused: another user could plant its -wal there first).
        place = os.path.join(shared, "app")
        os.mkdir(place, 0o755)
        store = f"sqlite:///{place}/jobs.db"
        async with pool.WorkerPool(spawn=1, store=store, metrics_port=0) as p:
            job = await routines.fail.submit(f"cannot reach {URL}")
            with pytest.raises(ValueError):
                await job.result(timeout=WAIT_S)
            assert URL in (job.error or "")  # the owner's own record: the full text
            for suffix in ("", "-wal", "-shm"):
                assert stat.S_IMODE(os.stat(f"{place}/jobs.db{suffix}").st_mode) == 0o600, suffix
            out = os.path.join(shared, "read.out")
            assert await run_as_nobody(shared, "read.py", READ_FILE, f"{place}/jobs.db", out) == 0
            with open(out, "rb") as f:
                assert f.read() == b"refused: Permission denied"
            _, port = p.metrics_address
            rebound = await nobody_gets(shared, port, f"rebound.example:{port}")
            assert rebound["status"] == 421 and "hunter2" not in rebound["body"] and job.id not in rebound["body"]
            assert (await nobody_gets(shared, port, f"rebound.example:{port}", "/"))["status"] == 421
            shown = await nobody_gets(shared, port, f"127.0.0.1:{port}")
            assert shown["status"] == 200
            (failed,) = json.loads(shown["body"])["failed_jobs"]
            assert "app:***@db.internal" in failed["error"] and "hunter2" not in shown["body"]
        for args in (("show", job.id), ("list", "--state", "failed"), ("show", job.id, "--json")):
            text = jobs_command(store, *args)
            assert "hunter2" not in text and "***" in text, (args, text)


async def test_an_oversized_or_malformed_http_request_should_get_a_4xx_and_one_log_line(caplog):
    """Test that a 100 kB request line (it once logged a full traceback each time: log flooding), a header
    flood and a line that is not HTTP each get a 4xx and one warning line, no traceback; the port goes on."""
    caplog.set_level(logging.INFO, logger="leakypool.metrics")
    async with pool.WorkerPool(spawn=0, metrics_port=0) as p:
        _, port = p.metrics_address
        requests = {
            414: b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            431: b"GET /status HTTP/1.1\r\n" + b"X-A: b\r\n" * 100 + b"\r\n",
            400: b"\x16\x03\x01 hello\r\n\r\n",
        }
        for code, request in requests.items():
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            status = await asyncio.wait_for(reader.readline(), WAIT_S)
            writer.close()
            assert status.split()[1] == str(code).encode(), (code, status)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"GET /status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        assert b" 200 " in await asyncio.wait_for(reader.readline(), WAIT_S)
        writer.close()
    records = [r for r in caplog.records if r.name == "leakypool.metrics"]
    assert len(records) == 3 and not any(r.exc_info for r in records), [r.getMessage() for r in records]


# -- 6. secrets off command lines, and out of routines' reach ------------------------------------------------

READ_CMDLINE = r"""
import sys
with open(f"/proc/{sys.argv[1]}/cmdline", "rb") as f:
    data = f.read()
with open(sys.argv[2], "wb") as f:
    f.write(data)
"""
"""``nobody`` reads a process's command line (anyone may)."""


async def command_line_as_nobody(pid: int) -> bytes:
    with shared_directory() as shared:
        out = os.path.join(shared, "cmdline")
        assert await run_as_nobody(shared, "cmdline.py", READ_CMDLINE, str(pid), out) == 0
        with open(out, "rb") as f:
            return f.read()


@needs_root
async def test_a_registry_password_should_be_on_no_command_line(postgres_url, tmp_path):
    """Test that ``--registry @FILE`` and ``env:NAME`` keep the URL's password off ``/proc/PID/cmdline`` (which
    ``nobody`` reads), and that a worker a provisioner starts gets it in its environment, not its arguments."""
    from tests.pg import PASSWORD

    url_file = tmp_path / "registry-url"
    url_file.write_text(postgres_url + "\n")
    url_file.chmod(0o600)
    discovery = pool.StoreDiscovery(postgres_url, poll_interval=0.2)
    async with worker("--port", "0", "--registry", f"@{url_file}") as w:
        assert PASSWORD.encode() not in await command_line_as_nobody(w.pid)
        async with pool.WorkerPool(discovery=discovery) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            assert await routines.pid() == w.pid
    command = [sys.executable, "worker_main.py", "{worker_args}", "--log-level", "WARNING"]
    async with pool.WorkerPool(
        provisioner=pool.CommandProvisioner(command), discovery=discovery, max_workers=1, queue_depth=5
    ) as p:
        provisioned = await routines.pid()
        assert PASSWORD.encode() not in await command_line_as_nobody(provisioned)


async def test_the_secret_should_not_be_in_a_routines_environment(tmp_path):
    """Test that ``LEAKYPOOL_SECRET`` (a spawned worker's key; a standalone worker's given secret) is gone from
    the environment a routine and its children see."""
    probe = ("sh", "-c", "echo ${LEAKYPOOL_SECRET:-none}; env | grep -c '^LEAKYPOOL_SECRET=' || true")
    async with pool.WorkerPool(spawn=1, worker_template=False):  # a fresh interpreter, the key in its env
        assert (await routines.run_program(*probe)).split() == [b"none", b"0"]
    read_fd, write_fd = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKYPOOL_")}
    env["LEAKYPOOL_SECRET"] = "given-in-the-environment"
    args = [sys.executable, "worker_main.py", "--port", "0", "--ready-fd", str(write_fd)]
    try:
        async with Child(args, env=env, pass_fds=(write_fd,)):
            os.close(write_fd)
            write_fd = -1
            line = await asyncio.wait_for(asyncio.to_thread(os.read, read_fd, 4096), WAIT_S)
            info = json.loads(line.decode().split("READY ", 1)[1].splitlines()[0])
            standalone = pool.WorkerMetadata(uid=uuid.UUID(info["uid"]), address=f"127.0.0.1:{info['port']}")
            discovery = pool.StaticDiscovery(workers=[standalone])
            async with pool.WorkerPool(discovery=discovery, secret="given-in-the-environment") as p:
                await p.wait_for_workers(1, timeout=WAIT_S)
                assert (await routines.run_program(*probe)).split() == [b"none", b"0"]
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
