"""Tests for giving back what the store has an owner hold beyond what it runs (`pool._jobs._stores._strays`).

On a real SQLite file and a real PostgreSQL server."""

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
    async def test_reconcile_should_give_back_only_the_jobs_held_in_the_store_and_not_kept(self, store_url):
        """Test that an owner's pending and running jobs not kept go back (leasable again); kept and others' stay.

        A running stray is pending again and due at once, its attempt still
        counted; a pending one goes back as it was.
        """
        store = open_store(store_url)
        await store.open()
        try:
            now = time.time()
            ids = ("kept", "stray", "running", "kept-running", "theirs", "theirs-running")
            for job_id in ids:
                await store.submit(
                    NewJob(id=job_id, routine="r", payload=b"p", created_at=now, deadline=now + 60),
                    owner="other" if job_id.startswith("theirs") else "me",
                )
            for job_id in ("running", "kept-running", "theirs-running"):
                assert await store.mark_running(job_id, "other" if job_id.startswith("theirs") else "me", now)
            assert await store.reconcile("me", ["kept", "kept-running"], now + 1) == (["stray"], ["running"])
            assert {r.id: (r.state, r.owner) for r in await store.list()} == {
                "kept": ("pending", "me"),
                "stray": ("pending", ""),
                "running": ("pending", ""),
                "kept-running": ("running", "me"),
                "theirs": ("pending", "other"),
                "theirs-running": ("running", "other"),
            }
            revived = await store.get("running")
            assert revived is not None and (revived.attempts, revived.next_at) == (1, now + 1)
            assert sorted(r.id for r in await store.lease("someone", 10, now + 1)) == ["running", "stray"]
            assert await store.reconcile("me", ["kept", "kept-running"], now + 2) == ([], [])  # once
        finally:
            await store.close()
