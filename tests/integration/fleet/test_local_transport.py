"""Spawned workers over a unix socket in a private directory (the default), or over TCP when asked."""

from __future__ import annotations

import os
import stat

import pytest

import pool
from tests.integration.routines import common as routines

pytestmark = pytest.mark.integration


async def test_spawned_workers_should_serve_unix_sockets_in_a_directory_only_we_can_enter():
    async with pool.WorkerPool(spawn=2) as p:
        addresses = [w.address for w in p.workers.values()]
        assert all(a.startswith("unix:") for a in addresses)
        directory = os.path.dirname(addresses[0].removeprefix("unix:"))
        info = os.stat(directory)
        assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == os.getuid()  # others cannot reach the sockets
        assert {os.path.dirname(a.removeprefix("unix:")) for a in addresses} == {directory}
        assert all(stat.S_ISSOCK(os.stat(a.removeprefix("unix:")).st_mode) for a in addresses)
        assert await routines.add(2, 3) == 5
        assert len({await routines.pid() for _ in range(20)}) >= 1
    assert not os.path.exists(directory)  # removed with the pool


async def test_tcp_should_be_used_when_asked_for():
    async with pool.WorkerPool(spawn=1, local_transport="tcp") as p:
        (metadata,) = p.workers.values()
        assert metadata.address.startswith("127.0.0.1:")
        assert await routines.add(1, 1) == 2


async def test_a_grown_worker_should_serve_a_socket_in_the_same_directory(one_slot_pool):
    async with one_slot_pool(max_workers=2, queue_depth=10, idle_timeout=30) as p:
        (first,) = p.workers.values()
        import asyncio

        await asyncio.gather(*(routines.sleep(0.3) for _ in range(4)))  # the second call grows the pool
        await p.wait_for_workers(2, timeout=30)
        directories = {os.path.dirname(w.address.removeprefix("unix:")) for w in p.workers.values()}
        assert directories == {os.path.dirname(first.address.removeprefix("unix:"))}


def test_local_transport_should_be_checked():
    with pytest.raises(pool.ConfigError, match="local_transport"):
        pool.WorkerPool(spawn=1, local_transport="udp")
