"""Tests for pool._dispatch._membership: set-aside unreachable workers, broken spawned workers."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pool
from pool._discovery import DiscoveryEvent
from pool._dispatch import _membership
from pool._dispatch._membership import Membership
from pool._transport._trust import Trust


def membership(broken: list[uuid.UUID], closed: list[object] | None = None, joined: Any = None) -> Membership:
    closed = [] if closed is None else closed
    return Membership(
        None,
        credentials=None,
        trust=Trust.of("a key"),
        tags=(),
        changed=lambda: None,
        close=closed.extend,
        is_local=lambda uid: False,
        broken_local=broken.append,
        joined=joined,
    )


class TestMembership:
    async def test_unreachable_worker_should_be_set_aside_then_tried_again(self, monkeypatch):
        """Test that a discovered worker unreachable for a while sits out, then comes back."""
        monkeypatch.setattr(_membership, "UNREACHABLE_EVICT_S", 0.0)
        monkeypatch.setattr(_membership, "SET_ASIDE_S", 0.05)
        m = membership([])
        worker = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
        m.admit(worker)
        m.unreachable(worker, pool.WorkerBroken("refused"))
        assert worker.uid not in m.roster
        await m.until(lambda: worker.uid in m.roster, timeout=5)
        await m.close()

    async def test_admit_should_tell_joined_once_the_worker_is_in_the_roster(self):
        """Test the hook the call path uses to feed a worker that joins while calls wait in other lines."""
        seen: list[tuple[uuid.UUID, bool]] = []
        m = membership([], joined=lambda uid: seen.append((uid, uid in m.roster)))
        worker = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
        m.admit(worker)
        assert seen == [(worker.uid, True)]
        await m.close()

    async def test_a_worker_withdrawn_while_a_call_to_it_failed_should_never_be_brought_back(self, monkeypatch):
        """Test that a dispatch failing after discovery withdrew its worker sets nothing aside: the worker stays out.

        (A worker that idled out withdraws its record and exits; a call already on its way to it then fails.
        Set aside, it came back after SET_ASIDE_S and stayed in the pool, withdrawn, for good.)
        """
        monkeypatch.setattr(_membership, "UNREACHABLE_EVICT_S", 0.0)
        monkeypatch.setattr(_membership, "SET_ASIDE_S", 0.01)
        m = membership([])
        worker = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
        m.apply(DiscoveryEvent("added", worker))
        m.apply(DiscoveryEvent("dropped", worker))
        m.unreachable(worker, pool.WorkerBroken("refused"))  # a call that was on its way to it
        await asyncio.sleep(0.2)  # twenty times SET_ASIDE_S: when right, it never comes back whatever the wait
        assert worker.uid not in m.roster
        await m.close()

    async def test_broken_spawned_worker_should_be_handed_back_for_replacement(self):
        """Test that a hard failure of a local worker asks the fleet to replace it."""
        broken: list[uuid.UUID] = []
        m = membership(broken)
        local = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1", local=True)
        m.admit(local)
        (connection,) = m.evict(local.uid, "INTERNAL", graceful=False)
        assert connection.metadata == local  # returned to be closed: evict does no I/O itself
        assert broken == [local.uid]
        assert m.evict(local.uid, "again", graceful=False) == []  # already gone: nothing more
        assert broken == [local.uid]
        await connection.close()
        await m.close()

    async def test_evict_should_hand_a_retiring_connection_to_close_when_graceful(self):
        """Test that a graceful eviction returns nothing now and closes the idle connection via ``close``."""
        closed: list[object] = []
        m = membership([], closed)
        worker = pool.WorkerMetadata(uid=uuid.uuid4(), address="127.0.0.1:1")
        m.admit(worker)
        assert m.evict(worker.uid, "withdrawn") == []
        assert [c.metadata for c in closed] == [worker]  # no call in flight: handed over at once
        for connection in closed:
            await connection.close()
        await m.close()
