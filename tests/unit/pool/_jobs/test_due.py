"""The scheduler's knowledge of the next due time (`pool._jobs._due.NextDue`): read from the store only when needed."""

from __future__ import annotations

import math
import time

import pytest

from pool._jobs._due import NextDue
from pool._jobs._store import NewJob
from pool._jobs._stores._open import open_store


class _Store:
    """A store of an earlier release (no next_due): its oldest due time, and how often it was asked."""

    def __init__(self, due: float | None) -> None:
        self.due, self.reads = due, 0

    async def oldest_due(self, now: float) -> float | None:
        self.reads += 1
        return self.due


async def test_the_next_due_time_should_be_read_once_until_forgotten_or_passed():
    """Test that a known future due time costs no read; a forget, or its passing, does."""
    store, due = _Store(100.0), NextDue()
    assert await due.seconds(store, 40.0) == 60.0 and await due.seconds(store, 50.0) == 50.0 and store.reads == 1
    assert due.learn(70.0) and not due.learn(80.0)  # sooner than known: sleep less; later: nothing changes
    assert await due.seconds(store, 60.0) == 10.0 and store.reads == 1
    assert await due.seconds(store, 70.0) == 30.0 and store.reads == 2  # passed (leased just now): read the next
    due.forget()
    store.due = None
    assert await due.seconds(store, 75.0) == math.inf and store.reads == 3


async def test_a_job_that_came_due_since_the_last_lease_looked_should_make_the_wait_zero(tmp_path):
    """Test the early timer: a lease just before a job's due time missed it, so the next wait must not skip it."""
    store = open_store(f"sqlite:///{tmp_path / 'jobs.db'}")
    await store.open()
    try:
        t = time.time()
        await store.submit(NewJob(id="j", routine="r", payload=b"p", created_at=t - 1, deadline=t + 60, next_at=t))
        due = NextDue()
        assert await due.seconds(store, t + 0.001, seen=t - 0.0005) <= 0  # due since the lease looked: lease now
        due.forget()
        assert await due.seconds(store, t + 0.001, seen=t + 0.0005) == math.inf  # the lease saw it (and left it)
        due.forget()
        assert await due.seconds(store, t - 10) == pytest.approx(10)  # not due yet: sleep until it
    finally:
        await store.close()
