"""Tests for paused queues in the stores (`pool._jobs._stores._pauses`): a real SQLite file and a real PostgreSQL."""

from __future__ import annotations

import time

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
