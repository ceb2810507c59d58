"""Tests for the resource hooks and their composition: thresholds, missing signals, pickling, async members."""

from __future__ import annotations

import asyncio
import math
import pickle

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from backpressure import (
    AllOf,
    AnyOf,
    BackpressureContext,
    LatencyBackpressure,
    LoopLagBackpressure,
    MemoryBackpressure,
    TaskCountBackpressure,
)
from backpressure._resources import p99

fractions = st.floats(min_value=1e-6, max_value=1.0)
used = st.floats(min_value=0.0, max_value=1.0)
seconds = st.floats(min_value=1e-6, max_value=1e3)


def ctx(**signals: object) -> BackpressureContext:
    return BackpressureContext(0, None, **signals)  # type: ignore[arg-type]


@given(limit=fractions, fraction=used)
def test_memory_should_reject_exactly_at_or_above_its_fraction(limit, fraction):
    assert MemoryBackpressure(limit)(ctx(memory_fraction=fraction)) == (fraction >= limit)


@given(limit=seconds, lag=st.floats(min_value=0.0, max_value=2e3))
def test_loop_lag_should_reject_exactly_at_or_above_its_lag(limit, lag):
    assert LoopLagBackpressure(limit)(ctx(loop_lag_s=lag)) == (lag >= limit)


@given(limit=seconds, window=st.integers(1, 50), latencies=st.lists(st.floats(0.0, 2e3), max_size=80))
def test_latency_should_judge_the_p99_of_the_last_window_once_it_has_that_many(limit, window, latencies):
    verdict = LatencyBackpressure(limit, window)(ctx(recent_latencies_s=tuple(latencies)))
    if len(latencies) < window:
        assert verdict is False  # no opinion yet
    else:
        last = sorted(latencies[-window:])
        assert verdict == (last[math.ceil(0.99 * window) - 1] > limit)


@given(samples=st.lists(st.floats(0.0, 1e3), min_size=1, max_size=300))
def test_p99_should_be_the_nearest_rank(samples):
    value = p99(samples)
    assert sum(s <= value for s in samples) >= 0.99 * len(samples)  # at least 99% at or below it
    assert sum(s < value for s in samples) < 0.99 * len(samples)  # and it is the smallest such sample


def test_hooks_should_accept_when_their_signal_is_missing_as_in_wool():
    """Test wool's context (count and task only): resource hooks have no opinion, composition still works."""
    wool_shaped = BackpressureContext(active_task_count=3, task=None)
    for hook in (MemoryBackpressure(0.01), LoopLagBackpressure(0.001), LatencyBackpressure(0.001, 1)):
        assert hook(wool_shaped) is False
    assert AnyOf(MemoryBackpressure(0.01), TaskCountBackpressure(3))(wool_shaped) is True
    assert AllOf(MemoryBackpressure(0.01), TaskCountBackpressure(3))(wool_shaped) is False


members = st.lists(st.booleans(), min_size=1, max_size=5)


class Fixed:
    """A hook with a fixed answer, sync or async."""

    def __init__(self, answer: bool, is_async: bool = False) -> None:
        self.answer, self.is_async = answer, is_async

    def __call__(self, ctx):
        if not self.is_async:
            return self.answer

        async def later() -> bool:
            await asyncio.sleep(0)
            return self.answer

        return later()


@given(answers=members, asyncs=st.lists(st.booleans(), min_size=5, max_size=5))
def test_any_of_and_all_of_should_be_or_and_and_of_their_members(answers, asyncs):
    hooks = [Fixed(a, asyncs[i]) for i, a in enumerate(answers)]
    for combined, rule in ((AnyOf(*hooks), any), (AllOf(*hooks), all)):
        verdict = combined(ctx())
        if any(asyncs[: len(answers)]):
            verdict = asyncio.run(verdict)
        assert verdict == rule(answers)


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)])
def test_hooks_should_survive_pickling_with_their_behaviour(dumps, loads):
    hook = AnyOf(
        TaskCountBackpressure(2), AllOf(MemoryBackpressure(0.8), LoopLagBackpressure(0.5)), LatencyBackpressure(1.5, 10)
    )
    again = loads(dumps(hook))
    assert again == hook and hash(again) == hash(hook) and repr(again) == repr(hook)
    assert AnyOf(TaskCountBackpressure(1)) != AnyOf(TaskCountBackpressure(2)) != AllOf(TaskCountBackpressure(2))
    assert MemoryBackpressure(0.5) != MemoryBackpressure(0.6) and LatencyBackpressure(1, 5) != LatencyBackpressure(1, 6)
    busy = BackpressureContext(0, None, memory_fraction=0.9, loop_lag_s=0.6)
    assert again(busy) is True and again(ctx(memory_fraction=0.9, loop_lag_s=0.1)) is False


@pytest.mark.parametrize(
    "make",
    [
        lambda: MemoryBackpressure(0),
        lambda: MemoryBackpressure(1.5),
        lambda: MemoryBackpressure(True),
        lambda: LoopLagBackpressure(0),
        lambda: LoopLagBackpressure(float("inf")),
        lambda: LatencyBackpressure(-1),
        lambda: LatencyBackpressure(1, 0),
        lambda: LatencyBackpressure(1, 2.5),
        lambda: AnyOf(),
        lambda: AllOf(),
    ],
)
def test_bad_thresholds_should_fail_at_construction(make):
    with pytest.raises((ValueError, TypeError)):
        make()


def test_a_member_that_is_not_a_hook_should_fail_at_construction():
    with pytest.raises(TypeError, match="expected backpressure hooks"):
        AnyOf(TaskCountBackpressure(1), 3)
