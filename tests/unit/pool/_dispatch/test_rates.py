"""The in-process rate book of calls: never more than n starts in any window of ``per`` seconds; FIFO; no polling."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._dispatch._rates import RateBook, next_start


@given(
    n=st.integers(1, 5),
    per=st.sampled_from([0.5, 1.0, 3.0]),
    arrivals=st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=40),
)
def test_next_start_should_never_let_more_than_n_start_in_any_window(n, per, arrivals):
    """Test the invariant over any arrival times: each start is when it fits, and no window holds more than n."""
    starts: collections.deque[float] = collections.deque()
    taken = []
    for now in sorted(arrivals):
        at = next_start(starts, n, per, max(now, taken[-1] if taken else now))
        starts.append(at)
        taken.append(at)
    for i, start in enumerate(taken):
        assert sum(1 for t in taken[i:] if t < start + per - 1e-9) <= n


def test_rate_limit_should_refuse_bad_values_in_one_line():
    for args, message in [
        ((0,), "n: expected an int >= 1"),
        ((2, 0), "per: expected seconds > 0"),
        ((True,), "n: expected"),
        ((1, float("inf")), "per: expected"),
    ]:
        with pytest.raises(ValueError, match=message):
            pool.RateLimit(*args)
    with pytest.raises(TypeError, match=r"rate: expected a pool\.RateLimit"):
        pool.Queue("q", rate=5)


async def test_calls_over_the_rate_should_start_in_order_one_window_apart():
    """Test the book: 2 per 0.2 s; six calls start in arrival order, in three windows."""
    book = RateBook()
    started: list[tuple[int, float]] = []

    async def call(i: int) -> None:
        await book.wait("q", "k", 2, 0.2)
        started.append((i, time.monotonic()))

    first = time.monotonic()  # no grant comes sooner; the (k+2)-th comes 0.2 s or more after the k-th
    await asyncio.gather(*(call(i) for i in range(6)))
    assert [i for i, _ in started] == list(range(6))
    assert all(t >= first + (i // 2) * 0.2 - 1e-3 for i, t in started)  # exact: no margin for a busy machine to eat
    await book.wait("q", "other-key", 2, 0.2)  # another key has a window of its own: at once
