"""Tests for paused queues in the stores (`pool._jobs._stores._pauses`): a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import contextlib
import sqlite3
import time

import asyncpg
import pytest

from pool._jobs._store import NewJob
from pool._jobs._stores._open import open_store


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request, tmp_path) -> str:
    if request.param == "postgres":
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def _job(job_id: str, queue: str) -> NewJob:
    now = time.time()
    return NewJob(id=job_id, routine="r", payload=b"p", created_at=now, deadline=now + 60, queue=queue, concurrency=5)


async def _pause_since(store_url: str, queue: str, paused_at: float) -> None:
    """Backdate ``queue``'s pause (what a long pause looks like, without waiting for it)."""
    if store_url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(store_url.removeprefix("sqlite:///"))) as db, db:
            db.execute("UPDATE leakypool_paused SET paused_at = ? WHERE queue = ?", (paused_at, queue))
        return
    db = await asyncpg.connect(store_url)
    try:
        await db.execute("UPDATE leakypool_paused SET paused_at = $1 WHERE queue = $2", paused_at, queue)
    finally:
        await db.close()


class TestPauses:
    async def test_lease_should_skip_a_paused_queue_and_take_it_again_once_resumed(self, store_url):
        """Test that a paused queue's jobs are accepted but not leased; other queues are; resume frees them."""
        store = open_store(store_url)
        await store.open()
        try:
            await store.pause("mail")
            await store.pause("mail")  # idempotent
            assert await store.paused() == ["mail"]
            for job in (_job("m1", "mail"), _job("o1", "other"), _job("m2", "mail")):
                await store.submit(job)
            assert [r.id for r in await store.lease("a", 10, time.time() + 1)] == ["o1"]
            await store.resume("mail")
            assert await store.paused() == []
            assert sorted(r.id for r in await store.lease("a", 10, time.time() + 1)) == ["m1", "m2"]
        finally:
            await store.close()

    async def test_pauses_should_survive_reopening_the_store(self, store_url):
        """Test that a pause lives in the store, not in the process that made it."""
        first = open_store(store_url)
        await first.open()
        await first.pause("mail")
        await first.close()
        second = open_store(store_url)
        await second.open()
        try:
            assert await second.paused() == ["mail"]
        finally:
            await second.close()

    async def test_resume_should_not_count_the_time_a_job_spent_paused_against_its_dispatch_deadline(self, store_url):
        """Test that resuming pushes each due job's deadline on by the time it spent paused, and no other's."""
        store = open_store(store_url)
        await store.open()
        try:
            now = time.time()
            await store.pause("mail")
            await _pause_since(store_url, "mail", now - 100)

            def job(job_id: str, due: float, queue: str = "mail") -> NewJob:  # 60 s to start once due
                return NewJob(
                    id=job_id,
                    routine="r",
                    payload=b"p",
                    created_at=min(due, now),
                    deadline=due + 60,
                    queue=queue,
                    concurrency=5,
                    next_at=due,
                )

            for new in (
                job("waiting", now - 150),  # 10 s left when paused, 100 s paused
                job("submitted_while_paused", now - 50),  # paused for all of its 50 s
                job("expired_before_the_pause", now - 300),
                job("delayed", now + 30),  # not due yet: not waiting
                job("other_queue", now - 150, queue="other"),
            ):
                await store.submit(new)
            await store.resume("mail")
            await store.resume("mail")  # a retried resume: the pause is gone, nothing moves twice
            deadlines = {r.id: r.deadline - now for r in await store.list(limit=10)}
            assert deadlines == pytest.approx(
                {
                    "waiting": 10.0,
                    "submitted_while_paused": 60.0,
                    "expired_before_the_pause": -140.0,
                    "delayed": 90.0,
                    "other_queue": -90.0,
                },
                abs=2.0,
            )
        finally:
            await store.close()


async def test_a_role_without_the_create_privilege_should_open_a_store_its_owner_set_up(postgres_server, postgres_url):
    """Test that opening an up-to-date PostgreSQL store creates nothing (the paused table included)."""
    owner = open_store(postgres_url)
    await owner.open()  # the owner creates the schema, paused table and all
    await owner.close()
    database = postgres_url.rsplit("/", 1)[1]
    role = f"app_{database[-20:]}"
    postgres_server.psql(f"CREATE ROLE {role} LOGIN PASSWORD 'app'")
    try:
        postgres_server.psql(
            f"REVOKE CREATE ON SCHEMA public FROM PUBLIC; GRANT USAGE ON SCHEMA public TO {role}; "
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}",
            database=database,
        )
        app = open_store(postgres_url.replace("leaky:s3cret@", f"{role}:app@"))
        await app.open()
        try:
            await app.pause("mail")
            assert await app.paused() == ["mail"]
        finally:
            await app.close()
    finally:
        postgres_server.psql(f"DROP OWNED BY {role}; DROP ROLE {role}", database=database)
