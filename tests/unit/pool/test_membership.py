"""Tests for pool._membership: set-aside unreachable workers, broken spawned workers."""

from __future__ import annotations

import asyncio
import uuid

import pool
from pool import _membership
from pool._membership import Membership


def membership(broken: list[uuid.UUID]) -> Membership:
    return Membership(None, credentials=None, tags=(), changed=lambda: None, is_local=lambda uid: False,
                      broken_local=broken.append)


class TestMembership:
    async def test_unreachable_worker_should_be_set_aside_then_tried_again(self, monkeypatch):
        """Test that a discovered worker unreachable for a while sits out, then comes back."""
        monkeypatch.setattr(_membership, "UNREACHABLE_EVICT_S", 0.0)
        monkeypatch.setattr(_membership, "SET_ASIDE_S", 0.05)
        m = membership([])
        worker = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
        m.admit(worker)
        m.unreachable(worker, pool.WorkerBroken("refused"))
        assert worker.uid not in m.members
        await m.until(lambda: worker.uid in m.members, timeout=5)
        await m.close()

    async def test_broken_spawned_worker_should_be_handed_back_for_replacement(self):
        """Test that a hard failure of a local worker asks the fleet to replace it."""
        broken: list[uuid.UUID] = []
        m = membership(broken)
        local = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1", local=True)
        m.admit(local)
        m.evict(local.uid, "INTERNAL", graceful=False)
        assert broken == [local.uid]
        m.evict(local.uid, "again", graceful=False)  # already gone: nothing more
        assert broken == [local.uid]
        await asyncio.sleep(0)
        await m.close()
