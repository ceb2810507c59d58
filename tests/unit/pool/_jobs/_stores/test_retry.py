"""Tests for the store's retry policy (`pool._jobs._stores._retry`): the back-off schedule and what is retried."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._jobs._store import JobRecord, MaintainedStore, NewJob
from pool._jobs._stores import _retry
from pool._jobs._stores._retry import (
    FIRST_DELAY_S,
    MAX_DELAY_S,
    RetryingStore,
    delay_s,
    lost_connection,
    retrying_store,
)


def _lost(message: str = "down") -> pool.StoreError:
    error = pool.StoreError(f"store x: {message}")
    error.__cause__ = ConnectionRefusedError(message)
    return error


class TestDelay:
    @given(st.integers(1, 200), st.floats(0, 100), st.floats(0, 100), st.floats(0, 0.999))
    def test_delay_should_stay_within_the_cap_and_the_budget(self, tries, elapsed, budget, jitter):
        """Test that no wait exceeds the cap nor ends past the budget, and that none is asked past it."""
        wait = delay_s(tries, elapsed, budget, jitter)
        if elapsed >= budget:
            assert wait is None
        else:
            assert wait is not None and 0 < wait <= min(MAX_DELAY_S, budget - elapsed)

    @given(st.integers(1, 30), st.floats(0, 0.999))
    def test_delay_should_grow_until_the_cap_when_the_budget_is_large(self, tries, jitter):
        """Test the doubling: each wait at least as long as the one before (same jitter), from the first delay."""
        first, later = delay_s(tries, 0, 1e9, jitter), delay_s(tries + 1, 0, 1e9, jitter)
        assert first is not None and later is not None and later >= first
        assert delay_s(1, 0, 1e9, 0.999) <= FIRST_DELAY_S

    def test_tries_should_cover_the_budget_in_few_steps(self):
        """Test that 10 s of retrying is about a dozen tries, not thousands (a restart costs little)."""
        elapsed, tries = 0.0, 1
        while (wait := delay_s(tries, elapsed, 10.0, 0.5)) is not None:
            elapsed, tries = elapsed + wait, tries + 1
        assert 10 <= tries <= 30 and elapsed == pytest.approx(10.0)


class TestLostConnection:
    def test_lost_connection_should_be_true_for_network_and_driver_connection_errors(self):
        """Test the causes that mean 'out of reach': refused, reset, timeouts, a locked SQLite file."""
        assert lost_connection(_lost())
        locked = pool.StoreError("store x: locked")
        locked.__cause__ = sqlite3.OperationalError("database is locked")
        assert lost_connection(locked)

    def test_lost_connection_should_be_false_for_errors_a_retry_cannot_fix(self):
        """Test that a statement's own error, or a closed store, is not retried."""
        assert not lost_connection(pool.StoreError("store x is not open"))
        bad = pool.StoreError("store x: syntax")
        bad.__cause__ = sqlite3.OperationalError("near 'SELEC': syntax error")
        assert not lost_connection(bad)


class _Flaky:
    """A store double whose calls fail ``failures`` times; ``committed`` says whether a failed submit wrote first."""

    url = "flaky://"

    def __init__(self, failures: int, committed: bool) -> None:
        self.failures, self.committed = failures, committed
        self.rows: dict[str, JobRecord] = {}
        self.submits = 0

    async def get(self, job_id: str) -> JobRecord | None:
        return self.rows.get(job_id)

    async def submit(self, job: NewJob, max_active=None, owner=""):
        self.submits += 1
        if job.id in self.rows:
            return self.rows[job.id], False
        record = JobRecord(
            job.id,
            job.routine,
            "pending",
            0,
            1,
            job.created_at,
            None,
            None,
            job.deadline,
            job.created_at,
            owner,
            "",
            job.payload,
            None,
            False,
            "",
            "",
            "",
        )
        if self.failures:
            self.failures -= 1
            if self.committed:
                self.rows[job.id] = record  # committed, but the answer is lost
            raise _lost("answer lost")
        self.rows[job.id] = record
        return record, True


class TestRetryingStore:
    @pytest.mark.parametrize("committed", [True, False])
    async def test_submit_should_make_one_job_when_a_try_fails_before_or_after_committing(self, committed, monkeypatch):
        """Test that a retried submit returns its own row as new, whether or not the failed try committed."""
        monkeypatch.setattr(_retry, "FIRST_DELAY_S", 0.001)
        inner = _Flaky(failures=2, committed=committed)
        job = NewJob(id="j", routine="r", payload=b"p", created_at=1.0, deadline=2.0)
        record, created = await RetryingStore(inner, 5.0).submit(job)
        assert created and record.id == "j" and list(inner.rows) == ["j"]

    async def test_submit_should_give_up_after_the_budget_with_the_last_error(self, monkeypatch):
        """Test that a store out of reach for longer than store_retry fails the call with its StoreError."""
        inner = _Flaky(failures=10**6, committed=False)
        job = NewJob(id="j", routine="r", payload=b"p", created_at=1.0, deadline=2.0)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(pool.StoreError, match="answer lost"):
            await RetryingStore(inner, 0.3).submit(job)
        assert loop.time() - started >= 0.3 * 0.9 and inner.submits > 2

    async def test_a_call_should_not_be_retried_for_an_error_a_retry_cannot_fix(self):
        """Test one try only for a StoreError that is not a lost connection."""
        calls = []

        class Closed(_Flaky):
            async def get(self, job_id):
                calls.append(job_id)
                raise pool.StoreError("store x is not open")

        with pytest.raises(pool.StoreError, match="not open"):
            await RetryingStore(Closed(0, False), 5.0).get("j")
        assert calls == ["j"]


class _FlakyMaintained(_Flaky):
    """A `MaintainedStore` double: each maintenance call loses its first answer (after committing, for requeue)."""

    def __init__(self) -> None:
        super().__init__(0, True)
        self.calls: list[str] = []

    def _once(self, name: str) -> None:
        self.calls.append(name)
        if self.calls.count(name) == 1:
            raise _lost(f"{name} answer lost")

    async def purge(self, finished_before, limit):
        self._once("purge")
        return 3

    async def next_due(self, now):
        self._once("next_due")
        return now + 1

    async def select(self, state=None, routine=None, limit=100):
        self._once("select")
        return []

    async def schedule_slot(self, name, slot, job):
        self._once("schedule_slot")

    async def requeue(self, job_id, now):
        self.calls.append("requeue")
        record = self.rows[job_id] = dataclasses.replace(self.rows[job_id], state="pending", next_at=now)
        if self.calls.count("requeue") == 1:
            raise _lost("requeue answer lost")  # committed: a second requeue would give it one more attempt
        return record


class TestRetryingMaintainedStore:
    async def test_maintenance_calls_should_ride_over_a_lost_connection(self, monkeypatch):
        """Test purge, next_due, select, schedule_slot and requeue under the same retry policy as the rest."""
        monkeypatch.setattr(_retry, "FIRST_DELAY_S", 0.001)
        inner = _FlakyMaintained()
        inner.rows["j"] = JobRecord(
            "j", "r", "failed", 1, 1, 1.0, 1.0, 2.0, 9.0, 1.0, "", "boom", b"p", None, False, "", "", ""
        )
        store = retrying_store(inner, 5.0)
        assert isinstance(store, MaintainedStore) and not isinstance(
            retrying_store(_Flaky(0, False), 5.0), MaintainedStore
        )
        assert await store.purge(10.0, 100) == 3 and await store.next_due(5.0) == 6.0
        assert await store.select() == [] and await store.schedule_slot("s", 60.0, None) is None
        assert (await store.requeue("j", 7.0)).state == "pending"
        assert inner.calls.count("requeue") == 1  # the lost answer's write was found: not re-queued twice
        assert {name: inner.calls.count(name) for name in ("purge", "next_due", "select", "schedule_slot")} == {
            "purge": 2,
            "next_due": 2,
            "select": 2,
            "schedule_slot": 2,
        }


class TestStoreRetrySetting:
    def test_store_retry_should_refuse_a_negative_value_in_one_line(self, monkeypatch):
        """Test bad input: a negative store_retry, as an argument and as LEAKYPOOL_STORE_RETRY."""
        with pytest.raises(pool.ConfigError, match=r"^store_retry: expected seconds >= 0, got '-1'$"):
            pool.WorkerPool(store_retry=-1, use_env=False)
        monkeypatch.setenv("LEAKYPOOL_STORE_RETRY", "-0.5")
        with pytest.raises(pool.ConfigError, match=r"^LEAKYPOOL_STORE_RETRY: expected seconds >= 0, got '-0.5'$"):
            pool.WorkerPool()


class TestRetryingBound:
    async def test_a_try_that_hangs_while_retrying_should_end_at_the_budget(self, monkeypatch):
        """Test a store that stops answering (a connect that hangs) after a lost connection: the call ends in bound."""
        monkeypatch.setattr(_retry, "LAST_TRY_S", 0.2)
        calls = []

        async def call():
            calls.append(1)
            if len(calls) == 1:
                raise _lost("reset")
            await asyncio.Event().wait()  # never answers

        with pytest.raises(pool.StoreError, match="reset"):  # (without the bound: TimeoutError from wait_for)
            await asyncio.wait_for(_retry.retrying("testing", 0.3, call), 60)
        assert len(calls) == 2

    async def test_a_store_that_never_answers_should_fail_the_call_within_the_bound(self, monkeypatch):
        """Test a first try that hangs (a stopped server): StoreError 'no answer' in one line, within budget + last try."""
        monkeypatch.setattr(_retry, "LAST_TRY_S", 0.2)

        async def call():
            await asyncio.Event().wait()

        with pytest.raises(pool.StoreError, match=r"^store x: no answer within 0.5s while testing$"):
            await asyncio.wait_for(_retry.retrying("testing", 0.3, call, "store x"), 60)

    async def test_a_shorter_bound_begun_after_a_longer_one_should_still_end_first(self, monkeypatch):
        """Test the one timer bounds share (`_Bounds`): a call of a shorter bound, begun while a longer-bound call
        runs, ends at its own bound, not the longer one's; the longer one ends at its own, and both fail."""
        monkeypatch.setattr(_retry, "LAST_TRY_S", 0.1)
        loop = asyncio.get_running_loop()
        ended: dict[str, float] = {}

        async def hang():
            await asyncio.Event().wait()

        async def bounded(name, budget):
            start = loop.time()
            with pytest.raises(pool.StoreError, match="no answer"):
                await _retry.retrying(name, budget, hang)
            ended[name] = loop.time() - start
            assert asyncio.current_task().cancelling() == 0  # the bound's cancel taken back: the task goes on as new

        long = asyncio.ensure_future(bounded("long", 2.0))
        await asyncio.sleep(0)
        await asyncio.wait_for(bounded("short", 0.1), 60)
        assert 0.19 <= ended["short"] < 2.0  # (its own 0.2 s, not the long one's 2.1 s; the clock may round)
        await asyncio.wait_for(long, 60)
        assert ended["long"] >= 2.09

    async def test_a_cancel_from_outside_should_stay_a_cancel(self, monkeypatch):
        """Test that cancelling a bounded call's task is a CancelledError as always, not a store error, and that
        a call that ended leaves its bound (nothing of it is kept, nothing cancels the task later)."""
        monkeypatch.setattr(_retry, "LAST_TRY_S", 0.1)

        entered = asyncio.Event()

        async def hang():
            entered.set()
            await asyncio.Event().wait()

        task = asyncio.ensure_future(_retry.retrying("testing", 0.1, hang))
        await asyncio.wait_for(entered.wait(), 5)  # the call runs, under its bound
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        async def quick():
            return 7

        assert await _retry.retrying("testing", 0.05, quick) == 7
        bounds = _retry._bounds()
        assert all(not line for line in bounds._lines.values())
        await asyncio.sleep(0.3)  # past both bounds: the timer fires and finds nothing to cancel
        assert asyncio.current_task().cancelling() == 0

    async def test_a_lease_cut_off_by_the_bound_should_be_in_doubt(self, monkeypatch):
        """Test a lease that never answers (a frozen server, whose commit may still land): the store says it is in doubt."""
        monkeypatch.setattr(_retry, "LAST_TRY_S", 0.2)

        class Frozen:
            url = "frozen://"

            async def lease(self, owner, limit, now):
                await asyncio.Event().wait()

        store = RetryingStore(Frozen(), 0.3)  # type: ignore[arg-type]
        with pytest.raises(pool.StoreError, match="no answer"):
            await asyncio.wait_for(store.lease("me", 10, 0.0), 60)
        assert store.lease_in_doubt  # so the scheduler gives back what the lease may have taken

    async def test_store_retry_zero_should_make_one_try_without_a_bound(self):
        """Test store_retry=0: the first error is the call's, and nothing times it out."""
        calls = []

        async def call():
            calls.append(1)
            raise _lost("refused")

        with pytest.raises(pool.StoreError, match="refused"):
            await _retry.retrying("testing", 0.0, call)
        assert calls == [1]


class TestLostConnectionAsyncpg:
    def test_lost_connection_should_tell_a_closed_connection_from_a_bad_argument(self):
        """Test asyncpg's errors: closed connections and server shutdowns are retried, a bad argument is not."""
        asyncpg = pytest.importorskip("asyncpg")

        def wrapped(cause: BaseException) -> pool.StoreError:
            error = pool.StoreError(f"store x: {cause}")
            error.__cause__ = cause
            return error

        assert lost_connection(wrapped(asyncpg.InterfaceError("connection is closed")))
        assert lost_connection(wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("closed mid-operation")))
        assert lost_connection(wrapped(asyncpg.exceptions.InternalClientError("cannot switch to state 12")))
        assert lost_connection(wrapped(asyncpg.exceptions.AdminShutdownError("terminating connection")))
        assert lost_connection(wrapped(asyncpg.exceptions.CannotConnectNowError("the database system is starting up")))
        assert not lost_connection(wrapped(asyncpg.exceptions.DataError("invalid input for query argument $1")))
        assert not lost_connection(wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key")))
