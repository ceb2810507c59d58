"""Tests for pool._jobs._pause: the paused queues one dispatching process sees, reread only when told."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

import pool
from pool._call._task import CallRecord
from pool._jobs._attempt import Attempt
from pool._jobs._codec import RetryPolicy
from pool._jobs._pause import PausedQueues
from pool._jobs._store import JobRecord
from pool._jobs._stores._retry import RetryingStore
from pool._jobs._stores._sqlite import SQLiteStore


@contextlib.asynccontextmanager
async def opened(tmp_path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(str(tmp_path / "jobs.db"))
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def waiting(job_id: str, queue: str) -> Attempt:
    record = JobRecord(
        job_id, "f", "pending", 0, 1, 0.0, None, None, 9.0, 0.0, "me", "", b"", None, False, queue, "", ""
    )
    return Attempt(record, CallRecord("f", False, b"", b"", b"", queue=queue), RetryPolicy())


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


class Unpausable:
    """A store of an earlier release: no pause, resume or paused."""

    url = "memory://"

    async def paused(self):  # only this, not the whole protocol: still not a PausableStore
        raise AssertionError("never asked")


class FlakyPauses:
    """A pausable store whose ``paused`` fails the first time."""

    def __init__(self) -> None:
        self.failures = 1

    async def pause(self, queue):
        pass

    async def resume(self, queue):
        pass

    async def paused(self):
        if self.failures:
            self.failures -= 1
            raise pool.StoreError("gone for a moment")
        return ["mail"]


class TestPausedQueues:
    async def test_refresh_should_return_the_waiting_attempts_of_paused_queues(self, tmp_path):
        """Test that the jobs already leased for a paused queue are the ones to give back, in their order."""
        async with opened(tmp_path) as store:
            await store.pause("mail")
            await store.pause("sms")
            pauses = PausedQueues(store, wake=Wakes())
            attempts = [waiting("m1", "mail"), waiting("o1", "other"), waiting("s1", "sms"), waiting("n1", "")]
            back = await pauses.refresh(attempts)
            assert [a.job.id for a in back] == ["m1", "s1"]
            assert pauses.names == {"mail", "sms"}

    async def test_refresh_should_reread_the_store_only_when_stale(self, tmp_path):
        """Test that a pause made elsewhere is seen after `changed` (a notice or the tick), not before."""
        async with opened(tmp_path) as store:
            wake = Wakes()
            pauses = PausedQueues(store, wake=wake)
            assert await pauses.refresh([waiting("m1", "mail")]) == []
            await store.pause("mail")  # another process pauses it
            assert await pauses.refresh([waiting("m1", "mail")]) == []  # not told yet: not reread
            pauses.changed()
            assert wake.count == 1 and pauses.stale
            assert [a.job.id for a in await pauses.refresh([waiting("m1", "mail")])] == ["m1"]
            assert not pauses.stale
            await store.resume("mail")
            pauses.changed()
            assert await pauses.refresh([waiting("m1", "mail")]) == [] and pauses.names == frozenset()

    async def test_refresh_should_see_through_a_retrying_store(self, tmp_path):
        """Test that a store wrapped for retries is still read for pauses (isinstance against the inner one)."""
        async with opened(tmp_path) as store:
            await store.pause("mail")
            pauses = PausedQueues(RetryingStore(store, budget_s=1.0), wake=Wakes())
            assert pauses.stale
            assert [a.job.id for a in await pauses.refresh([waiting("m1", "mail")])] == ["m1"]

    async def test_refresh_should_never_ask_a_store_that_cannot_pause(self):
        """Test that a store without pauses is never asked, even when told the pauses changed."""
        wake = Wakes()
        pauses = PausedQueues(Unpausable(), wake=wake)  # type: ignore[arg-type]
        assert not pauses.stale
        pauses.changed()
        assert wake.count == 1 and not pauses.stale
        assert await pauses.refresh([waiting("m1", "mail")]) == []

    async def test_refresh_should_never_ask_a_store_that_cannot_pause_when_wrapped_for_retries(self):
        """Test that the retrying wrapper (which has pause methods of its own) does not make the store pausable."""
        pauses = PausedQueues(RetryingStore(Unpausable(), budget_s=1.0), wake=Wakes())  # type: ignore[arg-type]
        assert not pauses.stale
        assert await pauses.refresh([waiting("m1", "mail")]) == []
        pauses.changed()
        assert not pauses.stale
        assert await pauses.refresh([waiting("m1", "mail")]) == []

    async def test_refresh_should_stay_stale_when_the_store_fails(self):
        """Test that a failed reread is tried again next time, not taken as "nothing paused"."""
        pauses = PausedQueues(FlakyPauses(), wake=Wakes())  # type: ignore[arg-type]
        with pytest.raises(pool.StoreError):
            await pauses.refresh([waiting("m1", "mail")])
        assert pauses.stale
        assert [a.job.id for a in await pauses.refresh([waiting("m1", "mail")])] == ["m1"]
