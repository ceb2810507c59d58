"""LAN workers found by zeroconf, in private network namespaces (never the real network).

Run through ``tools/private_net.sh`` (the README's test command does), or
these tests skip and say why.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib.util
import logging
import pathlib
import signal
import subprocess
import sys
import time
import uuid

import pytest

import pool
from balancer import PriorityLoadBalancer
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S, until_members
from tests.integration.support.netns import BRIDGE_IP, Lan, require_private_net
from tests.integration.support.signals import Signals
from tests.integration.support.workers import worker

pytestmark = [pytest.mark.integration, pytest.mark.lan]


def service_type() -> str:
    """A fresh DNS-SD type per test, so no test sees another's records."""
    return f"_lp{uuid.uuid4().hex[:8]}._tcp.local."


def lan_flags(ip: str, kind: str, *extra: str) -> list[str]:
    return ["--host", ip, "--discovery", "lan", "--interfaces", ip, "--service-type", kind, *extra]


async def test_lan_worker_should_be_found_used_and_dropped_when_it_exits():
    require_private_net()
    kind = service_type()
    discovery = pool.LanDiscovery(interfaces=["127.0.0.1"], service_type=kind)
    async with pool.WorkerPool(discovery=discovery) as p:
        async with worker(*lan_flags("127.0.0.1", kind, "--max-concurrent-tasks", "0", "--tags", "x")) as w:
            await p.wait_for_workers(1, timeout=30)
            (metadata,) = p.workers.values()
            assert (str(metadata.uid), metadata.pid, metadata.tags) == (w.uid, w.pid, frozenset({"x"}))
            assert metadata.address == f"127.0.0.1:{w.port}"
            assert await routines.pid() == w.pid
            w.child.signal(signal.SIGTERM)
            await until_members(p, lambda p: not p.workers, timeout=10)
            assert await w.child.wait(30) == 0


async def test_lan_worker_should_exit_cleanly_and_log_its_bound_port():
    """Test a LAN worker's exit: no "Task was destroyed" error, and the --insecure warning names the bound port."""
    import re
    import subprocess

    require_private_net()
    kind = service_type()
    with Lan(1) as lan:
        (host,) = lan.hosts
        flags = lan_flags(host.ip, kind, "--insecure", "--port", "0")
        async with worker(*flags, wrap=host.command, stderr=subprocess.PIPE) as w:
            discovery = pool.LanDiscovery(interfaces=[BRIDGE_IP], service_type=kind)
            async with pool.WorkerPool(discovery=discovery, insecure=True) as p:
                await p.wait_for_workers(1, timeout=30)  # announced (so the announcement task ran)
                assert await routines.pid() == w.pid
            w.child.signal(signal.SIGTERM)
            log = (await asyncio.wait_for(w.child.stderr.read(), 60)).decode()
            assert await w.child.wait(30) == 0
    warning = next(line for line in log.splitlines() if "WITHOUT client certificates" in line)
    assert re.search(rf"on {re.escape(host.ip)}:{w.port}\b", warning), warning
    assert "Task was destroyed" not in log and " ERROR " not in log, log


async def test_leaky_bucket_across_four_hosts():
    """Four LAN workers (1 task, --idle-timeout 2), two steady callers until the idle two have left.

    The two lowest-uid workers serve every task and stay; the other two idle
    out and leave by themselves; no call fails. The callers keep calling a
    second past the idle two's leaving (they ran a fixed 10 s before: most of
    it after the outcome was settled).
    """
    kind = service_type()
    uids = [f"00000000-0000-7000-8000-00000000000{i}" for i in range(1, 5)]
    with Lan(4) as lan:
        async with contextlib.AsyncExitStack() as stack:
            workers = [
                await stack.enter_async_context(
                    worker(
                        *lan_flags(
                            host.ip,
                            kind,
                            "--insecure",
                            "--max-concurrent-tasks",
                            "1",
                            "--idle-timeout",
                            "2",
                            "--uid",
                            uid,
                        ),
                        wrap=host.command,
                    )
                )
                for host, uid in zip(lan.hosts, uids, strict=True)
            ]
            discovery = pool.LanDiscovery(interfaces=[BRIDGE_IP], service_type=kind)
            async with pool.WorkerPool(discovery=discovery, loadbalancer=PriorityLoadBalancer(), insecure=True) as p:
                await p.wait_for_workers(4, timeout=30)
                ran_on: collections.Counter[int] = collections.Counter()
                failures: list[BaseException] = []
                stop = time.monotonic() + HANG_S

                async def caller() -> None:
                    while time.monotonic() < stop:
                        try:
                            ran_on[await routines.short(0.05)] += 1
                        except Exception as exc:  # noqa: BLE001 - recorded: the test asserts there are none
                            failures.append(exc)

                async def left() -> None:
                    nonlocal stop
                    try:
                        await until_members(p, lambda p: len(p.workers) <= 2, timeout=HANG_S)
                    finally:
                        stop = min(stop, time.monotonic() + 1.0)

                await asyncio.gather(caller(), caller(), left())
                assert failures == []
                assert set(ran_on) == {workers[0].pid, workers[1].pid}
                assert sorted(str(u) for u in p.workers) == uids[:2]  # the idle two left the pool
            assert [await w.child.wait(30) for w in workers[2:]] == [0, 0]  # they exited by themselves
            assert all(w.child.process.returncode is None for w in workers[:2])  # the busy two stayed


async def test_tls_worker_should_serve_a_pool_with_a_client_certificate_and_nobody_else(tmp_path):
    certs = load_make_certs().make_certs(tmp_path / "certs", ["10.77.0.10"])
    kind = service_type()
    with Lan(1) as lan:
        (host,) = lan.hosts
        tls = ["--tls-cert", certs["worker"], "--tls-key", certs["worker_key"], "--tls-client-ca", certs["ca"]]
        async with Signals(BRIDGE_IP) as signals, worker(*lan_flags(host.ip, kind, *tls), wrap=host.command) as w:
            discovery = pool.LanDiscovery(interfaces=[BRIDGE_IP], service_type=kind)
            good = pool.TlsCredentials(ca=certs["ca"], cert=certs["client"], key=certs["client_key"])
            async with pool.WorkerPool(discovery=discovery, credentials=good) as p:
                await p.wait_for_workers(1, timeout=30)
                assert next(iter(p.workers.values())).tls
                assert await routines.sleep(0, signals.address, "trusted") == 0
                await signals.wait("started trusted")

            # Without a client certificate, or with one from another CA: refused before anything runs.
            other = load_make_certs().make_certs(tmp_path / "other", ["10.77.0.10"])
            for name, credentials in (
                ("no-cert", pool.TlsCredentials(ca=certs["ca"])),
                ("other-ca", pool.TlsCredentials(ca=certs["ca"], cert=other["client"], key=other["client_key"])),
            ):
                async with pool.WorkerPool(discovery=discovery, credentials=credentials) as p:
                    await p.wait_for_workers(1, timeout=30)
                    with pytest.raises(pool.NoWorkersAvailable):
                        await routines.sleep(0, signals.address, name)
            # A pool without credentials does not even admit the TLS worker.
            async with pool.WorkerPool(discovery=discovery) as p:
                with pytest.raises(TimeoutError):
                    await p.wait_for_workers(1, timeout=3)
            assert signals.count("started no-cert") == signals.count("started other-ca") == 0
            assert w.child.process.returncode is None


async def test_a_workers_own_certificate_should_not_stand_in_for_another_worker(tmp_path):
    """Test issue 43's shared certificate name: each worker gets a certificate naming its own address, and a
    pool that checks the address it dials (``server_name=None``) refuses a worker presenting another one's
    (a host broken into, posing as another), while the genuine certificate serves."""
    certs = load_make_certs().make_certs(tmp_path / "certs", ["10.77.0.10", "10.77.0.11"])
    kind = service_type()
    strict = pool.TlsCredentials(ca=certs["ca"], cert=certs["client"], key=certs["client_key"], server_name=None)
    with Lan(1) as lan:
        (host,) = lan.hosts
        assert host.ip == "10.77.0.10"
        for presented, serves in (("10.77.0.11", False), ("10.77.0.10", True)):
            tls = ["--tls-cert", certs[f"worker {presented}"], "--tls-key", certs[f"worker {presented} key"]]
            tls += ["--tls-client-ca", certs["ca"]]
            async with worker(*lan_flags(host.ip, kind, *tls), wrap=host.command):
                discovery = pool.LanDiscovery(interfaces=[BRIDGE_IP], service_type=kind)
                async with pool.WorkerPool(discovery=discovery, credentials=strict) as p:
                    await p.wait_for_workers(1, timeout=30)
                    if serves:
                        assert await routines.add(1, 2) == 3
                    else:
                        with pytest.raises(pool.NoWorkersAvailable):
                            await routines.add(1, 2)


def load_make_certs():
    path = pathlib.Path(__file__).resolve().parents[3] / "tools" / "make_certs.py"
    spec = importlib.util.spec_from_file_location("make_certs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FAKE_LISTENER = r"""
import socket, sys
listener = socket.socket()
listener.bind((sys.argv[1], 0))
listener.listen()
print(listener.getsockname()[1], flush=True)
while True:
    connection, _ = listener.accept()
    with open(sys.argv[2], "a") as log:
        log.write("connected\n")
    connection.close()
"""
"""A fake worker on a LAN host: it logs every connection (a planted record's address)."""


async def test_a_record_that_says_plaintext_should_not_be_dialled_by_a_pool_with_credentials(tmp_path, caplog):
    """Test issue 43's downgrade: a planted record off loopback saying ``"tls": false`` is skipped (logged) by a
    pool that holds TLS credentials, and by one without them unless it says insecure=True: its address is never
    dialled. The transport is the pool's decision, not the record's."""
    caplog.set_level(logging.WARNING, logger="leakypool.pool")
    certs = load_make_certs().make_certs(tmp_path / "certs", ["10.77.0.10"])
    credentials = pool.TlsCredentials(ca=certs["ca"], cert=certs["client"], key=certs["client_key"])
    log = tmp_path / "connections.log"
    with Lan(1) as lan:
        (host,) = lan.hosts
        fake = host.child([sys.executable, "-c", FAKE_LISTENER, host.ip, str(log)], stdout=subprocess.PIPE)
        async with fake:
            port = int((await asyncio.wait_for(fake.stdout.readline(), 30)).decode())
            planted = pool.WorkerMetadata(uid=uuid.UUID(int=1), address=f"{host.ip}:{port}", tls=False)
            for options in ({"credentials": credentials}, {}):
                discovery = pool.StaticDiscovery(workers=[planted])
                async with pool.WorkerPool(spawn=1, discovery=discovery, **options) as p:
                    assert await routines.add(1, 2) == 3  # the pool's own worker serves
                    assert planted.uid not in p.workers
            assert not log.exists()  # no connection: its address was never dialled
            async with pool.WorkerPool(discovery=pool.StaticDiscovery(workers=[planted]), insecure=True) as p:
                await p.wait_for_workers(1, timeout=30)  # the control: said so, the pool dials it
                with pytest.raises((pool.NoWorkersAvailable, pool.WorkerBroken)):
                    await routines.add(1, 2)  # (a fake: it never answers the handshake)
    lines = [r.getMessage() for r in caplog.records if "not admitting worker" in r.getMessage()]
    assert len(lines) == 2 and "does not choose the transport" in lines[0] and "insecure=True" in lines[1]
    assert log.read_text().count("connected") >= 1  # the control: dialled by the pool that said insecure=True
