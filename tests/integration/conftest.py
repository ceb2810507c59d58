"""Shared set-ups for integration tests: the pools and stores several files need.

Fixtures stay synchronous (tests/conftest.py runs async tests on its own
loop), so pools come as factories: ``async with one_slot_pool(...) as p:``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import pool
from backpressure import TaskCountBackpressure

PoolFactory = Callable[..., pool.WorkerPool]


@pytest.fixture
def one_slot_pool() -> PoolFactory:
    """Factory of pools whose workers each run one task at a time (default: one worker)."""

    def make(spawn: int = 1, **kwargs: object) -> pool.WorkerPool:
        return pool.WorkerPool(spawn=spawn, backpressure=TaskCountBackpressure(1), **kwargs)

    return make


@pytest.fixture
def store_url(tmp_path) -> str:
    """A fresh SQLite job store for this test."""
    return f"sqlite:///{tmp_path / 'jobs.db'}"


@pytest.fixture
def one_slot_store_pool(one_slot_pool: PoolFactory, store_url: str) -> PoolFactory:
    """Factory of one-slot pools with this test's job store."""

    def make(spawn: int = 1, **kwargs: object) -> pool.WorkerPool:
        return one_slot_pool(spawn, store=store_url, **kwargs)

    return make
