"""Tests for reaching PostgreSQL through a server's restart (`pool._jobs._stores._postgres_link`), on a real server.

The server ends every session with a FATAL error when it shuts down or an
administrator terminates a backend; asyncpg, reading it on an idle pooled
connection, leaves that connection unusable ("cannot switch to state 12;
another operation (2) is in progress") until it reads the end of the
stream. These tests end the backends of a live store and check that no
caller sees it and that no broken connection is used twice.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import pool
from pool._jobs._store import NewJob
from pool._jobs._stores._postgres import PostgresStore
from pool._jobs._stores._postgres_link import asyncpg_module
from pool._jobs._stores._retry import RetryingStore


def _terminate_all(server, url: str) -> None:
    database = url.rsplit("/", 1)[1]
    server.psql(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' "
        "AND pid <> pg_backend_pid()"
    )


def _break_next_release(store: PostgresStore, how: str) -> list[int]:
    """Make the next connection ``store`` releases break while asyncpg resets it (``how``; see below).

    What a failover does between a statement's answer and the release: the
    statement ran (and committed), then the connection breaks. ``ended``:
    the server ends the backend as the reset runs (asyncpg sees the
    connection close); ``refused``: the server's FATAL came first, so
    asyncpg refuses to send the reset at all ("cannot switch to state 15;
    another operation (2) is in progress", as seen in a failover). Returns
    a list that gets the broken backend's pid.
    """
    asyncpg_pool = store._pool
    broken: list[int] = []

    async def reset(connection) -> None:
        asyncpg_pool._reset = None  # once
        broken.append(connection.get_server_pid())
        if how == "refused":
            raise asyncpg_module().InternalClientError(
                "cannot switch to state 15; another operation (2) is in progress"
            )
        await connection.execute("SELECT pg_terminate_backend(pg_backend_pid())")  # raises: the backend is gone

    asyncpg_pool._reset = reset
    return broken


class TestRelease:
    @pytest.mark.parametrize("how", ["ended", "refused"])
    async def test_a_write_should_count_once_when_its_connection_breaks_on_release(self, postgres_url, how):
        """Test that writes whose backend ends while asyncpg resets the connection are reported done, and run once.

        Issue 40: the release's error reached the caller, which sent the
        write again; mark_running's second copy found the job running
        already and answered "not ours", so the scheduler dropped a job the
        store kept running under its live owner: run by nobody, for good.
        """
        store = PostgresStore(postgres_url)
        await store.open()
        try:
            now = time.time()
            await store.submit(NewJob(id="j", routine="r", payload=b"p", created_at=now, deadline=now + 60), owner="me")
            broken = _break_next_release(store, how)
            assert await store.mark_running("j", "me", now + 1)  # one try: no RetryingStore to paper over it
            assert broken  # the fault did happen
            record = await store.get("j")
            assert record is not None and (record.state, record.attempts, record.started_at) == ("running", 1, now + 1)
            broken = _break_next_release(store, how)
            assert await store.finish("j", "me", "succeeded", now + 2, outcome=b"o")
            assert broken
            record = await store.get("j")
            assert record is not None and (record.state, record.finished_at, record.owner) == ("succeeded", now + 2, "")
        finally:
            await store.close()


class TestBrokenConnections:
    async def test_calls_should_ride_over_terminated_backends_without_an_error(self, postgres_server, postgres_url):
        """Test a burst of lookups right after every backend was terminated: none raises (retried on new connections)."""
        store = RetryingStore(PostgresStore(postgres_url), 10.0)
        await store.open()
        try:
            await asyncio.gather(*(store.get(f"j{i}") for i in range(32)))  # fill the pool's connections
            for _ in range(3):
                _terminate_all(postgres_server, postgres_url)
                assert await asyncio.gather(*(store.get(f"j{i}") for i in range(32))) == [None] * 32
        finally:
            await store.close()

    async def test_a_broken_connection_should_be_terminated_not_reused(self, postgres_server, postgres_url):
        """Test that after a connection-level error the next call runs on a new backend, not the broken one."""
        store = PostgresStore(postgres_url)
        await store.open()
        try:
            guarded = store._db()
            first = await guarded.fetchval("SELECT pg_backend_pid()")
            _terminate_all(postgres_server, postgres_url)
            with pytest.raises(pool.StoreError) as raised:  # one try, no RetryingStore: the error is seen
                async with store._errors(), guarded.acquire() as db:
                    await asyncio.sleep(0.2)  # the FATAL and the end of the stream arrive
                    await db.fetchval("SELECT 1")
            assert "\n" not in str(raised.value)
            assert await guarded.fetchval("SELECT pg_backend_pid()") != first
        finally:
            await store.close()

    async def test_a_statement_should_never_meet_a_connection_broken_while_idle(self, postgres_server, postgres_url):
        """Test one try of each call right after the backends were terminated: no asyncpg state error reaches us.

        Each call either runs (on a new connection) or fails because the
        connection was closed; "another operation (2) is in progress" means
        a broken idle connection was handed out and used: it must not be.
        """
        store = PostgresStore(postgres_url)
        await store.open()
        try:
            errors = []
            for _ in range(5):
                await asyncio.gather(*(store.get(f"j{i}") for i in range(16)))  # connections idle in the pool
                _terminate_all(postgres_server, postgres_url)
                for outcome in await asyncio.gather(*(store.get(f"j{i}") for i in range(16)), return_exceptions=True):
                    if isinstance(outcome, BaseException):
                        assert isinstance(outcome, pool.StoreError), outcome
                        errors.append(str(outcome))
            assert not [e for e in errors if "another operation" in e]
        finally:
            await store.close()
