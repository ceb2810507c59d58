"""Provisioned capacity across "hosts" with no multicast: a CommandProvisioner and a PostgreSQL registry.

Three network namespaces joined by veth pairs to a bridge, with no
multicast route anywhere (zeroconf cannot find a thing, as on cloud
networks and in containers). A real PostgreSQL server listens on the
bridge. The pool's `CommandProvisioner` starts each worker on one of the
hosts (``nsenter ... worker_main.py {worker_args} --host HOST-IP`` with
mutual TLS, as off loopback it must); the worker records itself in the
registry, the pool's `StoreDiscovery` admits it, and it exits after
``--idle-timeout``, removing its record.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

import pool
from backpressure import TaskCountBackpressure
from tests import pg
from tests.integration.discovery.test_lan import load_make_certs
from tests.integration.fleet.test_capacity import recorded
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually, until_members
from tests.integration.support.netns import BRIDGE_IP, Lan

pytestmark = [pytest.mark.integration, pytest.mark.lan]

HOSTS = 3


@dataclasses.dataclass
class Cluster:
    """The hosts, the PostgreSQL server on the bridge, and the certificates."""

    lan: Lan
    server: pg.Server
    certs: dict[str, str]

    def database(self) -> tuple[str, str]:
        """A fresh database: (the pool's URL over loopback, the workers' URL over the bridge)."""
        name = "cap_" + uuid.uuid4().hex[:10]
        self.server.psql(f"CREATE DATABASE {name} OWNER {pg.USER}")
        url = self.server.url(name)
        return url, url.replace("@127.0.0.1:", f"@{BRIDGE_IP}:")

    def tls_flags(self) -> list[str]:
        c = self.certs
        return ["--tls-cert", c["worker"], "--tls-key", c["worker_key"], "--tls-client-ca", c["ca"]]

    def credentials(self) -> pool.TlsCredentials:
        return pool.TlsCredentials(ca=self.certs["ca"], cert=self.certs["client"], key=self.certs["client_key"])

    def provisioner(self, *, fail_unless: str = "") -> pool.CommandProvisioner:
        """Start worker number ``{seq}`` on host ``seq % HOSTS``; fail (status 1) while ``fail_unless`` is absent."""
        cases = " ".join(f"{h.index}) p={h.holder.pid} a={h.ip};;" for h in self.lan.hosts)
        refuse = '{ echo "quota exceeded: no capacity" >&2; exit 1; }'
        guard = f'[ -e "{fail_unless}" ] || {refuse}; ' if fail_unless else ""
        script = (
            f"{guard}n=$1; shift; case $((n % {HOSTS})) in {cases} esac; "
            f'exec nsenter -t "$p" -n {sys.executable} worker_main.py "$@" --host "$a" '
            f"{' '.join(self.tls_flags())} --registry-ttl 3 --log-level WARNING"
        )
        return pool.CommandProvisioner(["sh", "-c", script, "provision", "{seq}", "{worker_args}"])

    def pool(
        self, url: str, worker_url: str, provisioner: pool.Provisioner | None, **kwargs: object
    ) -> pool.WorkerPool:
        return pool.WorkerPool(
            provisioner=provisioner,
            discovery=pool.StoreDiscovery(url, worker_url=worker_url, poll_interval=0.2),
            credentials=self.credentials(),
            backpressure=TaskCountBackpressure(1),
            queue_depth=100,
            **kwargs,
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    if pg.find_bindir() is None:
        pytest.skip("PostgreSQL is not installed here; tools/install_system_packages.sh installs it")
    certs = load_make_certs().make_certs(tmp_path_factory.mktemp("certs"), [h for h in host_ips()])
    for path in certs.values():
        os.chmod(path, 0o644)  # read by workers (and the server runs as its own user)
    with Lan(HOSTS, multicast=False) as lan, pg.server() as server:
        listen_on_bridge(server)
        yield Cluster(lan, server, certs)


def host_ips() -> list[str]:
    return [f"10.77.0.{10 + i}" for i in range(HOSTS)]


def listen_on_bridge(server: pg.Server) -> None:
    """Restart ``server`` listening on the bridge too, accepting password logins from the hosts' subnet."""
    with open(os.path.join(server.data, "pg_hba.conf"), "a") as f:
        f.write("host all all 10.77.0.0/24 scram-sha-256\n")
    server.stop()
    start_on_bridge(server)


def start_on_bridge(server: pg.Server) -> None:
    options = f"-h 127.0.0.1,{BRIDGE_IP} -p {server.port} -k {server.sockets} -F -c max_connections=200"
    log = os.path.join(server.base, "server.log")
    server.run("pg_ctl", "-D", server.data, "-l", log, "-w", "-t", "60", "-o", options, "start")


def test_the_hosts_should_have_no_multicast_route(cluster):
    for host in cluster.lan.hosts:
        probe = subprocess.run(
            host.command(["ip", "route", "get", "224.0.0.251"]), capture_output=True, timeout=30, check=False
        )
        assert probe.returncode != 0, probe.stdout  # zeroconf's group is unreachable from every host


async def test_a_burst_should_grow_remote_workers_to_max_workers_and_drain_them_with_their_records(cluster):
    url, worker_url = cluster.database()
    provisioner = cluster.provisioner()
    async with cluster.pool(url, worker_url, provisioner, max_workers=HOSTS, idle_timeout=2.0) as p:
        assert not p.workers
        seen: set[uuid.UUID] = set()

        async def call(i: int) -> int:
            seen.update(p.workers)
            await routines.sleep(1.0)
            return i

        assert await asyncio.gather(*(call(i) for i in range(4 * HOSTS))) == list(range(4 * HOSTS))
        hosts = {m.address.split(":")[0] for m in p.workers.values()}
        assert len(seen | set(p.workers)) == HOSTS and hosts == set(host_ips())  # one worker per host
        assert all(not m.local and m.tls for m in p.workers.values())
        await eventually(lambda: not provisioner.pids, timeout=60)  # every remote worker idled out and exited...
        assert await recorded(url) == set()  # ...and removed its record
        await until_members(p, lambda p: not p.workers)


async def test_a_failing_provisioner_command_should_leave_the_work_waiting_then_serve_it(cluster, tmp_path):
    url, worker_url = cluster.database()
    marker = str(tmp_path / "capacity-granted")
    provisioner = cluster.provisioner(fail_unless=marker)
    async with cluster.pool(url, worker_url, provisioner, max_workers=1, idle_timeout=2.0) as p:
        call = asyncio.ensure_future(routines.add(2, 3))
        await eventually(lambda: p.stats().provision_failures >= 1)
        assert not call.done() and not p.workers
        open(marker, "w").close()  # the orchestrator has room again: the next request (after the back-off) works
        assert await asyncio.wait_for(call, 60) == 5
        await eventually(lambda: not provisioner.pids, timeout=60)


async def test_a_killed_remote_worker_should_expire_and_a_restarted_pool_should_find_the_live_ones(cluster):
    url, worker_url = cluster.database()
    hosts = cluster.lan.hosts
    flags = [*cluster.tls_flags(), "--registry", worker_url, "--registry-ttl", "2", "--max-concurrent-tasks", "0"]
    async with contextlib.AsyncExitStack() as stack:
        children = [
            await stack.enter_async_context(
                h.child([sys.executable, "worker_main.py", "--host", h.ip, *flags, "--log-level", "WARNING"])
            )
            for h in hosts[:2]
        ]
        async with cluster.pool(url, worker_url, None) as p:
            await until_members(p, lambda p: len(p.workers) == 2)
            pids = {await routines.pid() for _ in range(6)}
            assert pids == {c.pid for c in children}  # different namespaces, the same pid space
            children[0].signal(signal.SIGKILL)
            await children[0].wait(30)
            # its record expires 2 s (its TTL) after its last refresh; a generous bound on a wait, not a measure
            await until_members(p, lambda p: len(p.workers) == 1, timeout=30)
        assert len(await recorded(url)) == 1
        for _ in range(2):  # a pool restarted finds the live worker again
            async with cluster.pool(url, worker_url, None) as p:
                await p.wait_for_workers(1, timeout=30)
                assert await routines.pid() == children[1].pid


async def test_workers_should_keep_serving_through_a_registry_restart_and_be_followed_after_it(cluster):
    url, worker_url = cluster.database()
    host = cluster.lan.hosts[2]
    flags = [*cluster.tls_flags(), "--registry", worker_url, "--registry-ttl", "2", "--max-concurrent-tasks", "0"]
    async with host.child([sys.executable, "worker_main.py", "--host", host.ip, *flags, "--log-level", "WARNING"]) as w:
        async with cluster.pool(url, worker_url, None) as p:
            await p.wait_for_workers(1, timeout=30)
            await asyncio.to_thread(cluster.server.stop, "immediate")
            try:
                assert await routines.pid() == w.pid  # the registry says where a worker is; calls do not need it
                await asyncio.sleep(2.5)  # an outage longer than the record's TTL
                assert len(p.workers) == 1 and await routines.pid() == w.pid  # known workers stay meanwhile
            finally:
                await asyncio.to_thread(start_on_bridge, cluster.server)
            await eventually(recorded_fresh(url), timeout=30)  # the worker wrote its record back
            w.signal(signal.SIGTERM)
            await until_members(p, lambda p: not p.workers)  # the pool follows the registry again
            assert await w.wait(30) == 0


def recorded_fresh(url: str):
    async def check() -> bool:
        import asyncpg

        try:
            db = await asyncpg.connect(url)
        except (OSError, asyncpg.PostgresError):
            return False
        try:
            return bool(await db.fetchval("SELECT count(*) FROM leakypool_workers WHERE expires_at > now()"))
        finally:
            await db.close()

    return check
