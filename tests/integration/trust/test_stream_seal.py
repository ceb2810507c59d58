"""A relay on the path off loopback, without TLS: it may pass the handshake on, but not alter a call (issue 51, 6).

The worker runs on a host of its own (a network namespace), the pool dials a
relay on the bridge (10.77.0.1: not loopback), and the relay forwards to
the worker, rewriting an argument in flight. The pool's proof asks for
sealed messages (`pool._transport._stream_seal`), so the rewritten message
does not open on the worker: the call never runs with the relay's value.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

import pool
from tests.integration.routines import common as routines
from tests.integration.support.child import Child
from tests.integration.support.netns import BRIDGE_IP, Lan, require_private_net
from tests.integration.support.strangers import RELAY
from tests.integration.support.workers import worker

pytestmark = [pytest.mark.integration, pytest.mark.lan]

WAIT_S = 30.0

ORIGINAL, REWRITTEN = "pay-alice-0000100", "pay-mallory-99999"
"""The argument a caller sends, and what the relay turns it into (the same length: gRPC's framing holds)."""


@asynccontextmanager
async def relay(target_ip: str, target_port: int, find: str, put: str) -> AsyncIterator[int]:
    """Run the `RELAY` script on the bridge address, rewriting FIND to PUT; yield its port; kill and reap it after."""
    args = [sys.executable, "-c", RELAY, str(target_port), "-", BRIDGE_IP, target_ip, find, put]
    async with Child(args, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL) as child:
        yield int((await child.stdout.readline()).decode())


async def call_through(w_uid: str, port: int) -> object:
    """``echo(ORIGINAL)`` from a pool that reaches the worker only through the relay at BRIDGE_IP:port."""
    relayed = pool.WorkerMetadata(uid=uuid.UUID(w_uid), address=f"{BRIDGE_IP}:{port}")
    async with pool.WorkerPool(discovery=pool.StaticDiscovery(workers=[relayed]), insecure=True) as p:
        await p.wait_for_workers(1, timeout=WAIT_S)
        return await routines.echo(ORIGINAL)


async def test_a_relay_off_loopback_should_not_alter_a_call_undetected(caplog):
    """Test issue 51 finding 8: the relay's rewritten argument never reaches the routine; the stream ends, naming
    the broken seal. The control (the same relay, rewriting nothing the pool sends) completes the call, so the
    sealed stream itself works end to end across a relay."""
    require_private_net()
    caplog.set_level(logging.INFO, logger="leakypool.pool")
    with Lan(1, multicast=False) as lan:
        (host,) = lan.hosts
        async with worker("--host", host.ip, "--port", "0", "--insecure", wrap=host.command) as w:
            async with relay(host.ip, w.port, "not-in-any-call", "not-in-any-call") as port:
                assert await call_through(w.uid, port) == ORIGINAL
            async with relay(host.ip, w.port, ORIGINAL, REWRITTEN) as port:
                with pytest.raises((pool.WorkerBroken, pool.NoWorkersAvailable)) as caught:
                    await call_through(w.uid, port)
    assert REWRITTEN not in str(caught.value)
    said = caplog.text + str(caught.value) + str(caught.value.__cause__)
    assert "does not carry its seal" in said or "undecodable frames" in said, said
