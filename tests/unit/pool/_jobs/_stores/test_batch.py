"""Tests for group commit: concurrent writes share statements; every caller gets its own result or error."""

from __future__ import annotations

import asyncio
import logging

from hypothesis import given, settings
from hypothesis import strategies as st

import pool
from pool._base._tasks import TaskOwner
from pool._jobs._stores._batch import Batcher


class Recorder:
    """A flush that records its batches; the test opens a gate to let a flight land."""

    def __init__(self, fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail = fail

    async def flush(self, items: list[int]) -> list[int]:
        self.batches.append(list(items))
        await self.gate.wait()
        if self.fail & set(items):
            raise pool.StoreError(f"cannot write {sorted(self.fail & set(items))}")
        return [item * 10 for item in items]


def batcher(recorder: Recorder, tasks: TaskOwner, **kwargs: int) -> Batcher[int, int]:
    return Batcher("test writes", recorder.flush, tasks, **kwargs)


async def test_writes_arriving_during_a_flight_should_share_the_next_statement():
    """Test group commit: 1 write flies alone; the 99 that arrive meanwhile fly together."""
    recorder, tasks = Recorder(), TaskOwner("test", logging.getLogger("test"))
    recorder.gate.clear()
    write = batcher(recorder, tasks, max_flights=1)
    try:
        first = asyncio.ensure_future(write(0))
        await asyncio.sleep(0)  # the first flight takes off with item 0 alone
        rest = [asyncio.ensure_future(write(i)) for i in range(1, 100)]
        await asyncio.sleep(0)
        recorder.gate.set()
        assert await first == 0
        assert await asyncio.gather(*rest) == [i * 10 for i in range(1, 100)]
        assert recorder.batches == [[0], list(range(1, 100))]
    finally:
        await tasks.aclose()


async def test_a_failed_statement_should_fail_only_its_own_writes():
    """Test errors: every write in the failed batch gets the store's error; other batches succeed."""
    recorder, tasks = Recorder(fail={3}), TaskOwner("test", logging.getLogger("test"))
    recorder.gate.clear()
    write = batcher(recorder, tasks, max_flights=1, max_batch=4)
    try:
        writes = [asyncio.ensure_future(write(i)) for i in range(9)]
        await asyncio.sleep(0)
        recorder.gate.set()
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert recorder.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
        assert [isinstance(r, pool.StoreError) for r in results] == [True] * 4 + [False] * 5
        assert results[4:] == [40, 50, 60, 70, 80]
    finally:
        await tasks.aclose()


async def test_closing_the_owner_should_fail_writes_in_flight_and_queued_not_hang():
    """Test close: a store closing mid-flight fails every unconfirmed write with StoreError."""
    recorder, tasks = Recorder(), TaskOwner("test", logging.getLogger("test"))
    recorder.gate.clear()
    write = batcher(recorder, tasks, max_flights=1)
    writes = [asyncio.ensure_future(write(i)) for i in range(5)]
    await asyncio.sleep(0)
    await tasks.aclose()
    for result in await asyncio.wait_for(asyncio.gather(*writes, return_exceptions=True), 5):
        assert isinstance(result, pool.StoreError)


async def test_a_cancelled_caller_should_not_disturb_the_others():
    """Test cancellation: the write still flies; the others get their results; nothing is left unread."""
    recorder, tasks = Recorder(), TaskOwner("test", logging.getLogger("test"))
    recorder.gate.clear()
    write = batcher(recorder, tasks, max_flights=1)
    try:
        writes = [asyncio.ensure_future(write(i)) for i in range(3)]
        await asyncio.sleep(0)
        writes[1].cancel()
        recorder.gate.set()
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert results[0] == 0 and results[2] == 20
        assert isinstance(results[1], asyncio.CancelledError)
    finally:
        await tasks.aclose()


@settings(max_examples=30, deadline=None)
@given(
    arrivals=st.lists(st.integers(0, 3), min_size=1, max_size=60),
    max_batch=st.integers(1, 8),
    max_flights=st.integers(1, 3),
)
def test_every_write_should_be_flushed_exactly_once_in_arrival_order(arrivals, max_batch, max_flights):
    """Test the invariant: whatever the timing, each write is in exactly one batch, batches keep order and size."""

    async def scenario() -> list[list[int]]:
        recorder, tasks = Recorder(), TaskOwner("test", logging.getLogger("test"))
        write = batcher(recorder, tasks, max_batch=max_batch, max_flights=max_flights)
        writes = []
        try:
            for item, pause in enumerate(arrivals):
                writes.append(asyncio.ensure_future(write(item)))
                for _ in range(pause):
                    await asyncio.sleep(0)
            assert await asyncio.gather(*writes) == [i * 10 for i in range(len(arrivals))]
        finally:
            await tasks.aclose()
        return recorder.batches

    batches = asyncio.run(scenario())
    flat = [item for batch in batches for item in batch]
    assert sorted(flat) == list(range(len(arrivals)))
    assert all(1 <= len(batch) <= max_batch for batch in batches)
    assert all(batch == sorted(batch) for batch in batches)
