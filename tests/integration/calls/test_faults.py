"""Each fault, at each stage, ends in one documented error, promptly; the pool keeps serving.

stage              fault                              caller sees
pickle (caller)    unpicklable argument               SerializationError (a TypeError), nothing sent
run (worker)       routine raises                     that exception, remote traceback as cause
result (worker)    unpicklable return value           SerializationError naming the result
result (worker)    unpicklable exception              SerializationError naming the exception
worker killed      SIGKILL mid-task                   WorkerBroken as its stream ends
transport          garbage bytes on the worker port   nothing: the worker keeps serving
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support.helpers import HANG_S, until_members
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_unpicklable_argument_should_raise_type_error_at_the_call_site_and_send_nothing():
    async with pool.WorkerPool(spawn=1) as p:
        lock = threading.Lock()
        with pytest.raises(TypeError, match=r"argument 1 of echo|argument 0 of echo") as info:
            routines.echo(lock)  # raises on the call itself, before any await
        assert isinstance(info.value, pool.SerializationError)
        assert "lock" in str(info.value)
        assert "0 dispatched" in repr(p) and p.stats().dispatched == 0


async def test_unpicklable_keyword_argument_should_be_named():
    async with pool.WorkerPool(spawn=1):
        with pytest.raises(pool.SerializationError, match=r"argument 'signals' of sleep"):
            routines.sleep(1, signals=threading.Lock())


async def test_unpicklable_result_should_raise_a_clear_error_and_keep_the_worker():
    async with pool.WorkerPool(spawn=1) as p:
        before = p.pids
        with pytest.raises(pool.SerializationError, match=r"the result of unpicklable_result\(\) cannot be pickled"):
            await routines.unpicklable_result()
        assert await routines.add(1, 1) == 2
        assert p.pids == before


async def test_unpicklable_exception_should_raise_a_clear_error_and_keep_the_worker():
    async with pool.WorkerPool(spawn=1) as p:
        before = p.pids
        with pytest.raises(pool.SerializationError, match=r"raised Unpicklable: holds a lock; it cannot be sent back"):
            await routines.unpicklable_exception()
        assert await routines.add(1, 1) == 2
        assert p.pids == before


async def test_killed_worker_should_fail_its_calls_with_worker_broken_promptly():
    async with Signals() as signals, pool.WorkerPool(spawn=2):
        call = asyncio.ensure_future(routines.sleep(3600, signals.address, "doomed"))
        victim = int((await signals.wait("started doomed")).split()[-1])
        os.kill(victim, signal.SIGKILL)
        # Promptly: the end of the worker's stream is what fails the call (no timer is involved), so a
        # pool that missed it would leave the call to its hour-long routine and run into HANG_S; a slow
        # machine delivers the end of the stream late, never not at all. The message names the stream.
        with pytest.raises(pool.WorkerBroken, match=r"^lost worker .*: UNAVAILABLE: .*stream closed$"):
            await asyncio.wait_for(call, HANG_S)
        # The pool keeps serving on the survivor (and replaces the dead one).
        results = await asyncio.gather(*(routines.pid() for _ in range(20)))
        assert victim not in results


async def test_killed_worker_should_be_replaced():
    async with pool.WorkerPool(spawn=1) as p:
        ((uid, metadata),) = p.workers.items()
        os.kill(metadata.pid, signal.SIGKILL)
        await until_members(p, lambda p: uid not in p.workers and len(p.workers) == 1)
        assert await routines.pid() != metadata.pid


@pytest.mark.parametrize("transport", ["unix", "tcp"])
async def test_garbage_on_the_worker_port_should_not_hurt_it(transport):
    async with pool.WorkerPool(spawn=1, local_transport=transport) as p:
        (metadata,) = p.workers.values()
        for payload in (
            os.urandom(4096),
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512),
        ):
            with _connect(metadata.address) as conn:
                conn.sendall(payload)
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(5)
                try:
                    while conn.recv(4096):
                        pass
                except (ConnectionResetError, TimeoutError):
                    pass
        assert await routines.add(20, 22) == 42
        assert p.pids == [metadata.pid]


def _connect(address: str) -> socket.socket:
    """A raw connection to a worker's address: ``unix:PATH`` or ``HOST:PORT``."""
    if address.startswith("unix:"):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(5)
        conn.connect(address.removeprefix("unix:"))
        return conn
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)
