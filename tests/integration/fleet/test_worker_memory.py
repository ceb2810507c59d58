"""A worker gives back the memory a large call left behind once it has been idle a while (issue 42 item 5)."""

from __future__ import annotations

import asyncio

import pytest

import pool
from pool._worker._release import RELEASE_AFTER_S
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually

pytestmark = pytest.mark.integration

LARGE_BYTES = 256 << 20
"""The value echoed: large enough that a region kept for reuse shows far above the 32 MiB allowed."""


async def _rss(p: pool.WorkerPool) -> int:
    (state,) = (await p.worker_states()).values()
    return state.memory_bytes


async def test_a_workers_rss_should_come_back_after_a_large_call_once_it_is_idle():
    """Test that the regions a 256 MiB echo left (kept for reuse) and the heap's top pad are given back.

    Before: the worker kept them for good (1.5 GiB at most), its RSS ~256 MiB above where it was.
    """
    async with pool.WorkerPool(spawn=1) as p:
        await routines.echo(b"warm")
        await asyncio.sleep(0.5)  # (resource signals are sampled every 0.2 s)
        before = await _rss(p)
        async with asyncio.timeout(120):
            assert len(await routines.echo(b"x" * LARGE_BYTES)) == LARGE_BYTES

        async def back() -> bool:
            return await _rss(p) - before < 32 << 20

        await eventually(back, timeout=RELEASE_AFTER_S + 15)  # idle RELEASE_AFTER_S, then the next sample
