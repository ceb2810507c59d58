"""Tests for backpressure.TaskCountBackpressure."""

from __future__ import annotations

import pickle

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from backpressure import BackpressureContext, BackpressureLike, TaskCountBackpressure


def ctx(count: int) -> BackpressureContext:
    return BackpressureContext(active_task_count=count, task=None)


class TestTaskCountBackpressure:
    def test_isinstance_should_satisfy_the_protocol(self):
        """Test that it is a BackpressureLike (structural)."""
        assert isinstance(TaskCountBackpressure(1), BackpressureLike)

    @given(st.integers(1, 10_000), st.integers(0, 20_000))
    def test_call_should_reject_exactly_when_count_reaches_threshold(self, threshold, count):
        """Test the decision for any threshold > 0: True (reject) iff count >= threshold."""
        assert TaskCountBackpressure(threshold)(ctx(count)) is (count >= threshold)

    @given(st.integers(0, 1_000_000))
    def test_call_should_never_reject_when_threshold_is_zero(self, count):
        """Test that 0 disables the hook."""
        assert TaskCountBackpressure(0)(ctx(count)) is False

    @given(st.integers(0, 100), st.integers(0, 200), st.sampled_from([pickle.dumps, cloudpickle.dumps]))
    def test_pickled_hook_should_behave_like_the_original(self, threshold, count, dumps):
        """Test that the shipped copy decides exactly as the original does."""
        hook = TaskCountBackpressure(threshold)
        restored = pickle.loads(dumps(hook))
        assert restored == hook
        assert restored(ctx(count)) is hook(ctx(count))

    @pytest.mark.parametrize("bad", [-1, -100])
    def test_init_should_raise_value_error_when_negative(self, bad):
        """Test that a negative threshold fails at construction."""
        with pytest.raises(ValueError, match=r"threshold: expected an int >= 0"):
            TaskCountBackpressure(bad)

    @pytest.mark.parametrize("bad", [1.0, "1", None, True])
    def test_init_should_raise_type_error_when_not_an_int(self, bad):
        """Test that a non-int threshold (bools included) fails at construction."""
        with pytest.raises(TypeError, match=r"threshold: expected an int >= 0"):
            TaskCountBackpressure(bad)

    def test_from_env_should_default_to_one(self):
        """Test the documented default of LEAKYPOOL_MAX_CONCURRENT_TASKS."""
        assert TaskCountBackpressure.from_env({}) == TaskCountBackpressure(1)
        assert TaskCountBackpressure.from_env({"LEAKYPOOL_MAX_CONCURRENT_TASKS": " 4 "}).threshold == 4

    @pytest.mark.parametrize("raw", ["-1", "x", "1.5"])
    def test_from_env_should_name_the_variable_when_invalid(self, raw):
        """Test the same validation, with the variable named."""
        with pytest.raises(
            ValueError, match=rf"^LEAKYPOOL_MAX_CONCURRENT_TASKS: expected an integer >= 0, got '{raw}'$"
        ):
            TaskCountBackpressure.from_env({"LEAKYPOOL_MAX_CONCURRENT_TASKS": raw})

    def test_context_should_be_frozen(self):
        """Test that hooks cannot tamper with their input."""
        with pytest.raises(AttributeError):
            ctx(1).active_task_count = 0
