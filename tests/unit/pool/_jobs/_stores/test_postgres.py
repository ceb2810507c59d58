"""Tests for `PostgresStore` (`pool._jobs._stores._postgres`) beyond the store contract, on a real server.

The contract every store keeps (submit, lease, fences, recovery, purge...)
is run against PostgreSQL in ../test_store.py. These are the store's own
decisions: the URLs it takes, what it says before it is open, opening and
closing more than once, which writes wake the other processes (and that a
process never wakes itself, except for a job committed in a caller's
transaction), and that only leases of jobs with limits wait for the lease
lock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import pytest

import pool
from pool._jobs._stores import _postgres_sql as sql
from pool._jobs._stores._postgres import PostgresStore
from tests.unit.pool._jobs.test_store import NOW, job

WAIT_S = 30.0
"""Bound on every wait for a notice or a lock (each comes in milliseconds)."""


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(url)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


class Notices:
    """What a store's `watch` delivers, in order; started listening (its first ``("due", "")`` taken)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def next(self) -> tuple[str, str]:
        return await asyncio.wait_for(self.queue.get(), WAIT_S)


@contextlib.asynccontextmanager
async def watching(store: PostgresStore) -> AsyncIterator[Notices]:
    notices = Notices()
    notices.task = asyncio.ensure_future(store.watch(lambda kind, arg: notices.queue.put_nowait((kind, arg))))
    try:
        assert await notices.next() == ("due", "")  # listening: what it may have missed
        yield notices
    finally:
        notices.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await notices.task


class TestPostgresStoreUrl:
    def test_init_should_refuse_a_url_when_it_is_not_postgresql(self):
        """Test that only postgresql:// and postgres:// URLs make a store, and the error quotes the URL."""
        for url in ("postgresql://u@h/db", "postgres://u@h/db"):
            assert PostgresStore.from_url(url).url == url
        for bad in ("sqlite:///jobs.db", "mysql://u@h/db", "h/db"):
            with pytest.raises(pool.ConfigError, match="expected postgresql://"):
                PostgresStore(bad)

    def test_repr_should_hide_the_password(self):
        text = repr(PostgresStore("postgresql://app:hunter2@db:5432/jobs"))
        assert "hunter2" not in text and text.startswith("PostgresStore('postgresql://app:") and "@db:5432/jobs" in text

    async def test_a_call_should_raise_store_error_without_the_password_when_not_open(self):
        """Test that a store used before `open` (or after `close`) says so in one line, the password hidden."""
        store = PostgresStore("postgresql://app:hunter2@db/jobs")
        with pytest.raises(pool.StoreError, match="is not open") as raised:
            await store.get("a")
        assert "hunter2" not in str(raised.value)


class TestPostgresStoreOpen:
    async def test_open_should_do_nothing_when_already_open(self, postgres_url, connections):
        """Test that a second `open` keeps the connections the first made (no second pool)."""
        store = PostgresStore(postgres_url)
        await store.open()
        try:
            made = len(connections)
            await store.open()
            assert len(connections) == made and len(connections.still_open()) == made
        finally:
            await store.close()
        assert connections.closed_and_collected() == made

    async def test_a_store_should_work_again_when_opened_after_close(self, postgres_url):
        """Test close twice (idempotent), then open again: the batched writes work as before."""
        store = PostgresStore(postgres_url)
        await store.open()
        assert (await store.submit(job("before")))[1]
        await store.close()
        await store.close()
        with pytest.raises(pool.StoreError, match="is not open"):
            await store.get("before")
        await store.open()
        try:
            assert (await store.submit(job("after")))[1]
            assert sorted(r.id for r in await store.list()) == ["after", "before"]
        finally:
            await store.close()

    async def test_counts_should_name_every_state_when_none_has_a_job(self, postgres_url):
        async with opened(postgres_url) as store:
            assert await store.counts() == dict.fromkeys(["cancelled", "failed", "pending", "running", "succeeded"], 0)
            await store.submit(job("a"))
            assert (await store.counts())["pending"] == 1


class TestPostgresStoreNotices:
    async def test_another_process_should_hear_due_cancel_and_pause_when_the_store_writes(self, postgres_url):
        """Test the notices one store's writes send another's `watch`: a submit is due work, cancelling a
        running job tells its owner, a pause and a resume are heard as such."""
        async with opened(postgres_url) as writer, opened(postgres_url) as other, watching(other) as heard:
            await writer.submit(job("a"))
            assert await heard.next() == ("due", "")
            await writer.lease("me", 1, NOW)
            assert await writer.mark_running("a", "me", NOW)
            await writer.cancel("a", NOW)
            assert await heard.next() == ("cancel", "me")
            await writer.pause("q")
            assert await heard.next() == ("pause", "")
            await writer.resume("q")
            assert [await heard.next(), await heard.next()] == [("pause", ""), ("due", "")]

    async def test_a_store_should_not_hear_its_own_notices(self, postgres_url):
        """Test that a store's `watch` skips what the same store sent (it acted on it already): the cancel it
        sent before another store's pause is never delivered to it (notices arrive in commit order)."""
        async with opened(postgres_url) as store, opened(postgres_url) as other:
            await store.submit(job("a"))
            await store.lease("me", 1, NOW)
            assert await store.mark_running("a", "me", NOW)
            async with watching(store) as heard:
                await store.cancel("a", NOW)  # would be ("cancel", "me")
                await store.unlease("me", [])  # would be ("due", "")
                await other.pause("q")
                assert await heard.next() == ("pause", "")

    async def test_a_write_that_changes_nothing_should_wake_nobody(self, postgres_url):
        """Test that a schedule slot recorded without a job, and a cancel of a pending job, send no notice,
        while a slot that inserts its job does (a marker from another write shows nothing came before)."""
        async with opened(postgres_url) as writer, opened(postgres_url) as other, watching(other) as heard:
            assert await writer.schedule_slot("every-minute", 60.0, None) is None
            await writer.pause("marker-1")
            assert await heard.next() == ("pause", "")
            assert await writer.schedule_slot("every-minute", 120.0, job("slot-120")) == 60.0
            assert await heard.next() == ("due", "")
            assert await writer.schedule_slot("every-minute", 120.0, job("slot-120-again")) == 120.0  # taken
            assert await writer.recover(NOW) == []
            await writer.pause("marker-2")
            assert await heard.next() == ("pause", "")

    async def test_a_submit_in_a_callers_transaction_should_wake_the_submitting_store_too(self, postgres_url):
        """Test that the job committed in the caller's transaction is heard by the store that submitted it
        (its notice names no store), and that the call refuses a connection outside a transaction."""
        async with opened(postgres_url) as store, watching(store) as heard:
            connection = await asyncpg.connect(postgres_url)
            try:
                with pytest.raises(pool.ConfigError, match="outside any transaction"):
                    await store.submit_in(connection, job("nope"))
                async with connection.transaction():
                    record, created = await store.submit_in(connection, job("in-tx"))
                assert created and (record.id, record.state) == ("in-tx", "pending")
            finally:
                await connection.close()
            assert await heard.next() == ("due", "")
            assert (await store.get("in-tx")) is not None and await store.get("nope") is None


class TestPostgresStoreLease:
    async def test_a_lease_should_wait_for_the_lease_lock_only_when_jobs_with_limits_are_due(self, postgres_url):
        """Test that a lease of jobs without limits never waits for another process's lease lock, and one that
        finds a job with limits due waits for it, then takes the job.

        Given another connection holding the lease lock (a process counting its limited jobs),
        when this store leases while only a free job is due, then once a queued job is due too,
        then the first lease returns while the lock is held, the second waits until it is released.
        """
        async with opened(postgres_url) as store:
            await store.submit(job("free"))
            await store.submit(job("queued", queue="q", concurrency=1, next_at=NOW + 100))
            holder = await asyncpg.connect(postgres_url)
            try:
                # Arrange: another process holds the lease lock
                held = holder.transaction()
                await held.start()
                await holder.execute("SELECT pg_advisory_xact_lock($1)", sql.LOCK_LEASE)

                # Act / Assert: no job with limits due, no wait
                free = await asyncio.wait_for(store.lease("me", 10, NOW), WAIT_S)
                assert [j.id for j in free] == ["free"]

                # Act / Assert: the queued job due, the lease waits for the lock
                leasing = asyncio.ensure_future(store.lease("me", 10, NOW + 100))
                for _ in range(3000):  # bounded: until the server shows the lease waiting for the lock
                    if await holder.fetchval(WAITING_FOR_AN_ADVISORY_LOCK):
                        break
                    await asyncio.sleep(0.01)
                assert await holder.fetchval(WAITING_FOR_AN_ADVISORY_LOCK)
                assert not leasing.done()
                await held.commit()
                assert [j.id for j in await asyncio.wait_for(leasing, WAIT_S)] == ["queued"]
            finally:
                await holder.close()


WAITING_FOR_AN_ADVISORY_LOCK = "SELECT count(*) > 0 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
