"""Tests for pool._jobs._presence: the owner lease kept alive, dead owners' jobs revived, notices turned into wake-ups.

A real SQLite store throughout; a short ``ttl`` makes the renewal tick quick (every ttl/3).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import AsyncIterator, Callable

import pool
from pool._jobs._presence import Presence
from pool._jobs._store import NewJob
from pool._jobs._stores._sqlite import SQLiteStore
from tests.integration.support.helpers import eventually

LONG_TTL = 600.0
"""A lease whose renewal tick never comes within a test."""
QUICK_TTL = 0.06
"""A lease renewed every 20 ms."""
TICK_TTL = 0.3
"""A lease renewed every 100 ms: time to spare on a busy machine before it runs out."""


class Counter:
    """A callback that counts its calls and lets a test wait for the n-th one."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self._changed = asyncio.Event()

    def __call__(self, *args: object) -> None:
        self.calls.append(args)
        self._changed.set()

    async def reach(self, n: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.calls) < n:
                self._changed.clear()
                await self._changed.wait()


class Noticing(SQLiteStore):
    """A SQLite store that can also deliver notices (what PostgreSQL's LISTEN/NOTIFY does): the test sends them."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.listener: Callable[[str, str], None] | None = None
        self.listening = asyncio.Event()
        self.lose_next = 0

    async def watch(self, notice: Callable[[str, str], None]) -> None:
        if self.lose_next:
            self.lose_next -= 1
            raise pool.StoreError("the listening connection broke")
        self.listener = notice
        self.listening.set()
        notice("due", "")
        await asyncio.Event().wait()


class Outages(SQLiteStore):
    """A SQLite store whose heartbeat fails while ``down`` is set."""

    down = False

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        if self.down:
            raise pool.StoreError("the database is restarting")
        await super().heartbeat(owner, now, ttl)


@contextlib.asynccontextmanager
async def present(store: SQLiteStore, ttl: float, **callbacks: Counter) -> AsyncIterator[Presence]:
    """``store`` opened and a started Presence of owner "me" on it; both closed after."""
    await store.open()
    callbacks.setdefault("wake", Counter())
    callbacks.setdefault("cancel", Counter())
    presence = Presence(store, "me", ttl, **callbacks)
    try:
        await presence.start()
        yield presence
    finally:
        await presence.aclose()
        await store.close()


def lease_expiry(store: SQLiteStore) -> float:
    """When owner "me"'s lease runs out, as the file says."""
    with contextlib.closing(sqlite3.connect(store.path)) as db:
        (expires_at,) = db.execute("SELECT expires_at FROM owners WHERE owner = 'me'").fetchone()
    return expires_at


async def running(store: SQLiteStore, job_id: str, owner: str) -> None:
    now = time.time()
    await store.submit(NewJob(job_id, "mod.fn", b"p", now, now + 60), owner=owner)
    assert await store.mark_running(job_id, owner, now)


class TestStart:
    async def test_start_should_revive_the_running_jobs_of_an_owner_without_a_lease(self, tmp_path, caplog):
        """Test that start re-queues a dead process's running job and says how many it revived."""
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        await store.open()
        await running(store, "orphan", "dead")  # "dead" never took a lease
        await store.close()
        with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
            async with present(store, LONG_TTL):
                record = await store.get("orphan")
        assert (record.state, record.owner) == ("pending", "")
        assert "re-queued 1 running job(s) whose dispatching process died" in caplog.text

    async def test_start_should_take_a_lease_that_keeps_this_owners_jobs(self, tmp_path):
        """Test that after start this owner's running jobs survive another process's recovery."""
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        async with present(store, LONG_TTL):
            await running(store, "mine", "me")
            assert await store.recover(time.time()) == []
            assert (await store.get("mine")).state == "running"


class TestTick:
    async def test_tick_should_renew_the_lease_and_call_back_each_time(self, tmp_path):
        """Test the tick: each renewal wakes the scheduler, rereads pauses and reports ``ticked``."""
        wake, pauses, ticked = Counter(), Counter(), Counter()
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        async with present(store, QUICK_TTL, wake=wake, pauses_changed=pauses, ticked=ticked):
            first = lease_expiry(store)
            await ticked.reach(3)
            assert lease_expiry(store) > first  # renewed
        assert len(wake.calls) >= 3 and len(pauses.calls) >= 3

    async def test_tick_should_cancel_the_jobs_whose_cancellation_was_requested(self, tmp_path):
        """Test that a cancel asked of a running job this owner holds reaches the ``cancel`` callback."""
        cancel = Counter()
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        async with present(store, TICK_TTL, cancel=cancel):
            await running(store, "mine", "me")
            await store.cancel("mine", time.time())
            await cancel.reach(1)
        assert cancel.calls[0] == ("mine",)

    async def test_tick_should_wait_out_a_store_outage_and_wake_once_it_is_over(self, tmp_path, caplog):
        """Test that a failed renewal is logged once, retried with back-off, and its end wakes the scheduler.

        Each renewal calls ``wake`` then ``pauses_changed`` with no await between them, so any wake-up beyond
        the renewals' is the one for the outage's end (whatever the number of ticks the test sees).
        """
        wake, pauses, ticked = Counter(), Counter(), Counter()
        store = Outages(str(tmp_path / "jobs.db"))
        with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
            async with present(store, QUICK_TTL, wake=wake, pauses_changed=pauses, ticked=ticked):
                await ticked.reach(1)
                store.down = True
                await eventually(lambda: "store unavailable while renewing" in caplog.text, timeout=5, interval=0.005)
                assert len(wake.calls) == len(pauses.calls)
                store.down = False
                await eventually(lambda: "store back after" in caplog.text, timeout=5, interval=0.005)
                assert len(wake.calls) == len(pauses.calls) + 1  # what came due meanwhile may have sent no notice
        assert caplog.text.count("store unavailable while renewing the owner lease") == 1

    async def test_a_renewal_answered_after_the_lease_ran_out_should_start_a_new_epoch(self, tmp_path, caplog):
        """Test that renewals failing past the lease's end make the next answered one a lapse: epoch 1, logged."""
        ticked = Counter()
        store = Outages(str(tmp_path / "jobs.db"))
        with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
            async with present(store, TICK_TTL, ticked=ticked) as presence:
                store.down = True
                epoch, ran_out = (
                    presence.lease.epoch,
                    presence.lease.until,
                )  # (a loaded machine may have lapsed already)
                await eventually(lambda: time.time() > ran_out, timeout=5)
                before = len(ticked.calls)
                store.down = False
                await ticked.reach(before + 1)
                assert presence.lease.epoch > epoch and presence.lease.until > ran_out
        assert "owner lease may have run out before it was renewed" in caplog.text


class TestNotices:
    async def test_notices_should_turn_into_wakes_pause_rereads_and_cancel_polls(self, tmp_path):
        """Test each notice kind: "due" wakes, "pause" rereads pauses, "cancel <me>" polls cancels at once."""
        wake, pauses, cancel = Counter(), Counter(), Counter()
        store = Noticing(str(tmp_path / "jobs.db"))
        async with present(store, LONG_TTL, wake=wake, pauses_changed=pauses, cancel=cancel) as presence:
            await asyncio.wait_for(store.listening.wait(), 5)
            await wake.reach(1)  # "due" once listening
            store.listener("due", "")
            assert len(wake.calls) == 2
            store.listener("pause", "")
            assert len(pauses.calls) == 1
            await running(store, "mine", "me")
            await store.cancel("mine", time.time())
            store.listener("cancel", "someone-else")  # another owner's: not ours to poll for
            assert not presence._poll_cancels.is_set()
            store.listener("cancel", "me")
            await cancel.reach(1)  # long before the tick (200 s away)
        assert cancel.calls == [("mine",)]

    async def test_notices_should_be_listened_for_again_when_the_listening_breaks(self, tmp_path, caplog):
        """Test that a lost listening connection is retried (after a back-off), and logged once."""
        store = Noticing(str(tmp_path / "jobs.db"))
        store.lose_next = 2
        with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
            async with present(store, LONG_TTL):
                await asyncio.wait_for(store.listening.wait(), 5)
        assert caplog.text.count("store unavailable while listening for other processes") == 1
        assert "store back after" in caplog.text

    async def test_a_store_without_notices_should_only_be_polled(self, tmp_path):
        """Test that no listener starts for a store that cannot watch (only the lease task runs)."""
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        async with present(store, LONG_TTL) as presence:
            assert len(presence._tasks) == 1
