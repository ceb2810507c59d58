"""Several "hosts" on one machine: network namespaces joined by a bridge.

The whole suite already runs in a private network namespace
(``tools/private_net.sh``), so nothing here can reach the real network.
Inside it, `Lan` makes a bridge (10.77.0.1/24, the test process's own
address on it) and N hosts, each a namespace held open by a sleeping
process, with a veth pair into the bridge and an address 10.77.0.(10+i).
Commands run on a host through ``nsenter``. Multicast (zeroconf) works
across the bridge, unless the `Lan` is made with ``multicast=False``: then
no namespace has a multicast route (as on cloud networks, in containers
and Kubernetes), so zeroconf cannot find anything and workers must be
found some other way (a store registry).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from typing import Self

import pytest

from tests.integration.support.child import Child

BRIDGE_IP = "10.77.0.1"


def require_private_net() -> None:
    """Skip unless running inside tools/private_net.sh's namespace."""
    if os.environ.get("LEAKYPOOL_IN_PRIVATE_NET") != "1":
        why = os.environ.get("LEAKYPOOL_TEST_NO_NETNS", "run the suite through tools/private_net.sh")
        pytest.skip(f"zeroconf tests need a private network namespace: {why}")


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Host:
    """One namespace: its address, and a way to run commands in it."""

    def __init__(self, index: int, holder: subprocess.Popen[bytes]) -> None:
        self.index = index
        self.ip = f"10.77.0.{10 + index}"
        self.holder = holder

    def command(self, args: list[str]) -> list[str]:
        return ["nsenter", "-t", str(self.holder.pid), "-n", *args]

    def child(self, args: list[str], **popen: object) -> Child:
        return Child(self.command(args), **popen)


class Lan:
    """``with Lan(4) as lan:`` — a bridge and four hosts, torn down (and reaped) on exit."""

    def __init__(self, hosts: int, *, multicast: bool = True) -> None:
        self.count = hosts
        self.multicast = multicast
        self.hosts: list[Host] = []
        self.bridge = "lpbr" + uuid.uuid4().hex[:6]

    def __enter__(self) -> Self:
        require_private_net()
        try:
            ip("link", "add", self.bridge, "type", "bridge", "mcast_snooping", "0")
        except (subprocess.CalledProcessError, FileNotFoundError) as exc:
            pytest.skip(f"cannot create a bridge here: {exc}")
        try:
            ip("addr", "add", f"{BRIDGE_IP}/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            if self.multicast:
                ip("route", "replace", "224.0.0.0/4", "dev", self.bridge)
            for index in range(self.count):
                self.hosts.append(self._host(index))
        except BaseException:
            self.__exit__()
            raise
        return self

    def _host(self, index: int) -> Host:
        # The holder says "ready" once it is inside its new namespace.
        holder = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", "echo ready; exec sleep infinity"], stdout=subprocess.PIPE
        )
        host = Host(index, holder)
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        outside, inside = f"{self.bridge}h{index}", f"{self.bridge}i{index}"
        ns = ["nsenter", "-t", str(holder.pid), "-n"]
        ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        ip("link", "set", inside, "netns", str(holder.pid))
        ip("link", "set", outside, "master", self.bridge)
        ip("link", "set", outside, "up")
        for args in (
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{host.ip}/24", "dev", inside],
            ["ip", "link", "set", inside, "up"],
            *([["ip", "route", "add", "224.0.0.0/4", "dev", inside]] if self.multicast else []),
        ):
            subprocess.run(ns + args, check=True, capture_output=True, timeout=30)
        return host

    def __exit__(self, *exc: object) -> None:
        for host in self.hosts:
            host.holder.kill()
            host.holder.wait(30)
            if host.holder.stdout is not None:
                host.holder.stdout.close()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30, check=False)
