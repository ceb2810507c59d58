"""Tests for pool.map: the sliding window, order, errors, cancellation, streaming."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool


class Probe:
    """A stand-in routine that records how many calls run at once."""

    def __init__(self, delay=lambda item: 0.0, fail=frozenset()):
        self.running = 0
        self.peak = 0
        self.calls: list[int] = []
        self.cancelled: list[int] = []
        self.delay = delay
        self.fail = fail

    async def __call__(self, item):
        self.calls.append(item)
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(self.delay(item))
            if item in self.fail:
                raise ValueError(f"item {item}")
            return item * 10
        except asyncio.CancelledError:
            self.cancelled.append(item)
            raise
        finally:
            self.running -= 1


class TestMap:
    async def test_map_should_run_twenty_items_three_at_a_time_each_once(self):
        """Test seed 002's example: 20 items at concurrency 3."""
        probe = Probe(delay=lambda i: 0.001 * (i % 4))
        results = [r async for r in pool.map(probe, range(20), concurrency=3)]
        assert results == [i * 10 for i in range(20)]
        assert probe.peak == 3 and sorted(probe.calls) == list(range(20))

    @given(st.lists(st.integers(0, 3), max_size=30), st.integers(1, 5), st.booleans())
    def test_map_should_keep_the_window_and_yield_every_item_once(self, delays, k, ordered):
        """Test for any delays, window and order: peak <= k, every item exactly once."""
        probe = Probe(delay=lambda i: delays[i] / 1000)

        async def run():
            return [r async for r in pool.map(probe, range(len(delays)), concurrency=k, ordered=ordered)]

        results = asyncio.run(run())
        assert probe.peak <= k
        assert sorted(probe.calls) == list(range(len(delays)))
        assert (results if ordered else sorted(results)) == [i * 10 for i in range(len(delays))]

    async def test_map_unordered_should_yield_as_calls_complete(self):
        """Test the as-completed variant: a fast item overtakes a slow one."""
        probe = Probe(delay=lambda i: 0.2 if i == 0 else 0.0)
        results = [r async for r in pool.map(probe, range(3), concurrency=3, ordered=False)]
        assert results[-1] == 0 and sorted(results) == [0, 10, 20]

    async def test_map_should_stop_at_the_first_error_and_cancel_the_rest(self):
        """Test fail-fast: raise, cancel what is in flight, dispatch nothing more."""
        probe = Probe(delay=lambda i: 0.0 if i == 1 else 10.0, fail={1})
        with pytest.raises(ValueError, match="item 1"):
            async for _ in pool.map(probe, range(100), concurrency=3, ordered=False):
                pass
        assert sorted(probe.calls) == [0, 1, 2] and sorted(probe.cancelled) == [0, 2]

    async def test_map_in_order_should_stop_at_a_failure_behind_a_slow_head(self):
        """Test fail-fast in input order: a failure is raised before the slow first item ends."""
        probe = Probe(delay=lambda i: 10.0 if i == 0 else 0.0, fail={1})
        with pytest.raises(ValueError, match="item 1"):
            async with asyncio.timeout(5):
                async for _ in pool.map(probe, range(100), concurrency=3):
                    pass
        assert sorted(probe.calls) == [0, 1, 2] and 0 in probe.cancelled

    async def test_map_should_yield_errors_in_place_when_asked(self):
        """Test error collection: every item runs; failures come back as exceptions."""
        probe = Probe(fail={2, 5})
        results = [r async for r in pool.map(probe, range(7), concurrency=2, return_exceptions=True)]
        assert [type(r).__name__ if isinstance(r, Exception) else r for r in results] == [
            0,
            10,
            "ValueError",
            30,
            40,
            "ValueError",
            60,
        ]

    async def test_cancelling_the_consumer_should_cancel_in_flight_calls_and_stop(self):
        """Test that a cancelled consumer leaves nothing running and dispatches nothing more."""
        probe = Probe(delay=lambda i: 10.0)

        async def consume():
            async for _ in pool.map(probe, itertools.count(), concurrency=4):
                pass

        consumer = asyncio.ensure_future(consume())
        async with asyncio.timeout(5):
            while len(probe.calls) < 4:
                await asyncio.sleep(0)
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        assert probe.calls == [0, 1, 2, 3] and sorted(probe.cancelled) == [0, 1, 2, 3]

    async def test_closing_early_should_cancel_in_flight_calls(self):
        """Test aclose() on break (contextlib.aclosing), the documented way."""
        probe = Probe(delay=lambda i: 0.0 if i < 2 else 10.0)
        async with contextlib.aclosing(pool.map(probe, range(10), concurrency=3)) as results:
            async for r in results:
                if r == 10:
                    break
        assert probe.running == 0 and probe.calls == [0, 1, 2]  # item 3 was cancelled before it started

    async def test_map_should_stream_a_million_item_generator(self):
        """Test laziness: items are pulled only as the window frees, never materialised."""
        pulled = 0

        def items():
            nonlocal pulled
            for i in range(1_000_000):
                pulled += 1
                yield i

        probe = Probe()
        consumed = 0
        async with contextlib.aclosing(pool.map(probe, items(), concurrency=8)) as results:
            async for _ in results:
                consumed += 1
                assert pulled <= consumed + 8
                if consumed == 5_000:
                    break
        assert pulled <= 5_008

    async def test_map_should_accept_an_async_iterable(self):
        """Test async sources."""

        async def items():
            for i in range(5):
                yield i

        assert [r async for r in pool.map(Probe(), items(), concurrency=2)] == [0, 10, 20, 30, 40]

    @pytest.mark.parametrize(("bad", "error"), [(0, ValueError), (1.5, TypeError), (True, TypeError)])
    def test_map_should_validate_concurrency_at_once(self, bad, error):
        """Test that a bad window fails at the call, not at the first iteration."""
        with pytest.raises(error, match="concurrency"):
            pool.map(Probe(), [], concurrency=bad)


class TestProgress:
    @given(st.lists(st.integers(0, 3), max_size=25), st.integers(1, 4), st.frozensets(st.integers(0, 24)))
    def test_progress_should_count_every_item_once_and_never_exceed_the_window(self, delays, k, fail):
        """Test the progress reports: monotonic, in flight <= window, ending at done + failed == total."""
        probe = Probe(delay=lambda i: delays[i] / 1000, fail=fail)
        reports: list[pool.Progress] = []

        async def run():
            return [
                r
                async for r in pool.map(
                    probe, list(range(len(delays))), concurrency=k, return_exceptions=True, progress=reports.append
                )
            ]

        asyncio.run(run())
        total = len(delays)
        assert all(r.total == total and 0 <= r.in_flight <= k for r in reports)
        ended = [r.done + r.failed for r in reports]
        assert ended == sorted(ended)  # never goes back
        if total:
            last = reports[-1]
            assert (last.done, last.failed, last.in_flight) == (
                total - len(fail & set(range(total))),
                len(fail & set(range(total))),
                0,
            )

    async def test_progress_of_a_generator_should_have_no_total(self):
        reports: list[pool.Progress] = []
        results = [r async for r in pool.map(Probe(), (i for i in range(5)), concurrency=2, progress=reports.append)]
        assert results == [0, 10, 20, 30, 40] and {r.total for r in reports} == {None}
        assert reports[-1] == pool.Progress(done=5, failed=0, in_flight=0, total=None)

    async def test_progress_true_should_draw_a_rich_bar(self, capsys):
        results = [r async for r in pool.map(Probe(), range(7), concurrency=3, progress=True)]
        assert results == [i * 10 for i in range(7)]
        err = capsys.readouterr().err
        assert "7/7" in err

    def test_progress_should_be_a_callable_or_a_bool(self):
        with pytest.raises(TypeError, match="progress"):
            pool.map(Probe(), range(3), concurrency=1, progress="yes")
