"""Tests for giving back jobs a lease took unseen (`pool._jobs._stores._strays`): a real SQLite file and PostgreSQL."""

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


class TestStrays:
    async def test_unlease_except_should_give_back_only_the_pending_jobs_not_kept(self, store_url):
        """Test that held pending jobs not kept go back (leasable again); kept, running and others' jobs stay."""
        store = open_store(store_url)
        await store.open()
        try:
            now = time.time()
            for job_id in ("kept", "stray", "running", "theirs"):
                await store.submit(
                    NewJob(id=job_id, routine="r", payload=b"p", created_at=now, deadline=now + 60),
                    owner="other" if job_id == "theirs" else "me",
                )
            assert await store.mark_running("running", "me", now)
            assert await store.unlease_except("me", ["kept"]) == ["stray"]
            assert {r.id: r.owner for r in await store.list()} == {
                "kept": "me",
                "stray": "",
                "running": "me",
                "theirs": "other",
            }
            assert [r.id for r in await store.lease("someone", 10, now + 1)] == ["stray"]
        finally:
            await store.close()
