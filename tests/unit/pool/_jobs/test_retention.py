"""Tests for pool._jobs._retention: finished jobs past keep_finished are purged, batch by batch, outages waited out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._jobs import _retention
from pool._jobs._retention import PURGE_BATCH, PURGE_EVERY_S, Retention, purge_wait
from pool._jobs._store import NewJob
from pool._jobs._stores._sqlite import SQLiteStore

NOW = 1_000_000.0


@contextlib.asynccontextmanager
async def opened(tmp_path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def ended(store: SQLiteStore, job_id: str, state: str, at: float) -> None:
    """A job of ours that ran and ended (``state``) at ``at``."""
    await store.submit(NewJob(job_id, "mod.fn", b"p", NOW - 10_000, NOW + 60), owner="me")
    assert await store.mark_running(job_id, "me", at - 1)
    assert await store.finish(job_id, "me", state, at, outcome=None)


class Batches:
    """A store that purges ``sizes`` jobs on successive calls (the batch loop's view), or fails while ``down``."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = list(sizes)
        self.calls: list[tuple[float, int]] = []
        self.down = 0
        self.answered = asyncio.Event()

    async def purge(self, finished_before: float, limit: int) -> int:
        self.calls.append((finished_before, limit))
        if self.down:
            self.down -= 1
            raise pool.StoreError("the database is restarting")
        self.answered.set()
        return self.sizes.pop(0) if self.sizes else 0

    async def next_due(self, now):
        return None

    async def select(self, state=None, routine=None, limit=100):
        return []

    async def schedule_slot(self, name, slot, job):
        return None

    async def requeue(self, job_id, now):
        return None


class TestPurgeWait:
    @given(seed=st.integers(0, 2**32))
    def test_purge_wait_should_come_soon_after_start_then_every_period_jittered(self, seed):
        """Test the two ranges: the first purge within 5..20% of the period, later ones within 75..125%."""
        rng = random.Random(seed)
        assert 0.05 * PURGE_EVERY_S <= purge_wait(True, rng) <= 0.2 * PURGE_EVERY_S
        assert 0.75 * PURGE_EVERY_S <= purge_wait(False, rng) <= 1.25 * PURGE_EVERY_S


class TestRetention:
    async def test_enabled_should_need_a_period_and_a_store_that_purges(self, tmp_path):
        """Test that 0 keeps jobs forever and a store without `purge` is left alone."""
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        assert Retention(store, 3600).enabled
        assert not Retention(store, 0).enabled
        assert not Retention(object(), 3600).enabled  # type: ignore[arg-type]

    async def test_purge_once_should_delete_only_final_jobs_that_ended_before_the_period(self, tmp_path):
        """Test the cut-off and the states: old final jobs go; recent ones, pending and running ones stay."""
        async with opened(tmp_path) as store:
            for job_id, state in (("old-ok", "succeeded"), ("old-failed", "failed"), ("old-cancelled", "cancelled")):
                await ended(store, job_id, state, NOW - 7200)
            await ended(store, "recent", "succeeded", NOW - 60)
            await store.submit(NewJob("pending", "mod.fn", b"p", NOW - 9000, NOW + 60))
            await store.submit(NewJob("running", "mod.fn", b"p", NOW - 9000, NOW + 60), owner="me")
            assert await store.mark_running("running", "me", NOW - 8000)
            retention = Retention(store, keep_finished=3600)
            assert await retention.purge_once(NOW) == 3
            assert sorted(r.id for r in await store.list(limit=10)) == ["pending", "recent", "running"]
            assert retention.purged == 3
            assert await retention.purge_once(NOW) == 0 and retention.purged == 3

    async def test_purge_once_should_go_on_batch_by_batch_until_one_is_not_full(self):
        """Test the batch loop: full batches are followed by another, a short one ends the purge; all counted."""
        store = Batches(PURGE_BATCH, PURGE_BATCH, 7)
        retention = Retention(store, keep_finished=100)  # type: ignore[arg-type]
        assert await asyncio.wait_for(retention.purge_once(NOW), 5) == 2 * PURGE_BATCH + 7
        assert store.calls == [(NOW - 100, PURGE_BATCH)] * 3
        assert retention.purged == 2 * PURGE_BATCH + 7

    async def test_purge_once_should_log_how_many_went_only_when_some_did(self, caplog):
        """Test one info line per purge that deleted jobs, none for an empty one."""
        with caplog.at_level(logging.INFO, logger="leakypool.jobs"):
            await Retention(Batches(0), 100).purge_once(NOW)  # type: ignore[arg-type]
            assert caplog.records == []
            await Retention(Batches(5), 100).purge_once(NOW)  # type: ignore[arg-type]
        assert [r.getMessage() for r in caplog.records] == ["purged 5 finished job(s) older than keep_finished=100s"]

    async def test_run_should_wait_out_a_store_outage_and_purge_again(self, monkeypatch, caplog):
        """Test that run survives StoreErrors (logged once when the outage starts, once when it ends)."""
        monkeypatch.setattr(_retention, "PURGE_EVERY_S", 0.001)  # a quick period, as quick_timing does elsewhere
        store = Batches(3)
        store.down = 2
        retention = Retention(store, keep_finished=100)  # type: ignore[arg-type]
        with caplog.at_level(logging.WARNING, logger="leakypool.jobs"):
            running = asyncio.ensure_future(retention.run())
            try:
                await asyncio.wait_for(store.answered.wait(), 5)
            finally:
                running.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await running
        assert len(store.calls) >= 3 and retention.purged == 3
        messages = [r.getMessage() for r in caplog.records]
        assert len(messages) == 2
        assert messages[0].startswith("store unavailable while purging finished jobs")
        assert messages[1].startswith("store back after")
        assert time.time() - store.calls[0][0] == pytest.approx(100, abs=5)  # "now" is the wall clock
