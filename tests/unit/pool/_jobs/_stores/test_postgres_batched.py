"""Tests for PostgreSQL's group-committed writes (submit, mark running, finish), on a real server."""

from __future__ import annotations

import asyncio

import pytest

from pool._jobs._store import NewJob
from pool._jobs._stores._postgres import PostgresStore


@pytest.mark.parametrize("size", [1, 300])
async def test_postgres_batched_writes_should_match_one_at_a_time(postgres_url, size):
    """Test the batched statements on a real server: submit, mark running, finish, each for many jobs at once."""
    store = PostgresStore(postgres_url)
    await store.open()
    try:
        jobs = [NewJob(id=f"b{i}", routine="r", payload=b"x", created_at=1.0 + i, deadline=1e12) for i in range(size)]
        submitted = await asyncio.gather(*(store.submit(job, owner="me") for job in jobs))
        again = await asyncio.gather(*(store.submit(job, owner="me") for job in jobs[:3]))
        assert [created for _, created in submitted] == [True] * size
        assert [created for _, created in again] == [False] * min(3, size)  # the active job, not a second one
        marked = await asyncio.gather(*(store.mark_running(job.id, "me", 5.0) for job in jobs))
        assert marked == [True] * size
        not_mine = await store.mark_running(jobs[0].id, "other", 6.0)
        finished = await asyncio.gather(
            *(store.finish(job.id, "me", "succeeded", 7.0, outcome=job.id.encode()) for job in jobs)
        )
        assert (not_mine, finished) == (False, [True] * size)
        records = {r.id: r for r in await store.list(limit=size + 10)}
        assert {(r.state, r.attempts, r.outcome, r.started_at, r.finished_at) for r in records.values()} == {
            ("succeeded", 1, r.id.encode(), 5.0, 7.0) for r in records.values()
        } and len(records) == size
    finally:
        await store.close()


async def test_a_batched_submit_should_store_every_column_as_the_one_row_insert_does(postgres_url):
    """Test that `INSERT_MANY` and `INSERT` read `NewJob.values` alike: no column lands in another's place.

    Given two jobs alike but for their id, every field set apart from its
    default, one submitted through the batch and one through the one-row path
    (a ceiling sends it there), their rows should differ in nothing but the id.
    """
    store = PostgresStore(postgres_url)
    await store.open()
    try:

        def job(job_id: str) -> NewJob:
            return NewJob(
                id=job_id, routine="r", payload=b"p", created_at=1.5, deadline=2e9, max_attempts=3, queue="q",
                key="k", workflow="w", concurrency=2, total=5, next_at=7.5, priority=4, rate=6, rate_per=8.5,
            )  # fmt: skip

        # Act
        await store.submit(job("batched"), owner="me")
        await store.submit(job("one-row"), max_active=100, owner="me")
        rows = await store._call("fetch", "SELECT * FROM leakypool_jobs ORDER BY id DESC")

        # Assert
        batched, one_row = ({k: v for k, v in dict(row).items() if k != "id"} for row in rows)
        assert batched == one_row
        assert (batched["next_at"], batched["rate_per"], batched["total"], batched["owner"]) == (7.5, 8.5, 5, "me")
    finally:
        await store.close()
