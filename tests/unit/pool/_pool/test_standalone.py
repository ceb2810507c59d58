"""Tests for pool.Executor's construction: the standard library's errors and messages, no worker started."""

from __future__ import annotations

import concurrent.futures as cf
import os

import pytest

import pool


class TestExecutor:
    def test_executor_should_be_a_concurrent_futures_executor(self):
        """Test that libraries taking an Executor accept it (isinstance) and that nothing starts before submit."""
        ex = pool.Executor(2)
        assert isinstance(ex, cf.Executor)
        assert repr(ex) == "<Executor open [2 workers, 0 pending, 0 handed to the pool]>"
        ex.shutdown()
        assert repr(ex).startswith("<Executor shut down")

    def test_max_workers_should_say_how_many_workers_the_pool_runs(self):
        """Test that max_workers reads back what was given, and one per CPU by default (what pool.joblib asks)."""

        assert pool.Executor(3).max_workers == 3
        assert pool.Executor().max_workers == (os.cpu_count() or 1)

    def test_terminate_workers_should_cancel_what_waits_and_shut_the_executor(self):
        """Test that terminate_workers (Python 3.14's name) shuts the executor at once, and twice is harmless."""
        ex = pool.Executor(1)
        ex.terminate_workers()
        with pytest.raises(RuntimeError, match="after shutdown"):
            ex.submit(print)
        ex.terminate_workers()

    @pytest.mark.parametrize("max_workers", [0, -1])
    def test_init_should_raise_value_error_when_max_workers_is_below_one(self, max_workers):
        """Test the standard library's message for max_workers <= 0."""
        with pytest.raises(ValueError, match=r"^max_workers must be greater than 0$"):
            pool.Executor(max_workers)

    def test_init_should_raise_type_error_when_initializer_is_not_callable(self):
        """Test the standard library's message for a non-callable initializer."""
        with pytest.raises(TypeError, match=r"^initializer must be a callable$"):
            pool.Executor(1, initializer=42)

    @pytest.mark.parametrize(("value", "error"), [(0, ValueError), (1.5, TypeError)])
    def test_init_should_reject_a_bad_max_tasks_per_child(self, value, error):
        """Test the standard library's checks of max_tasks_per_child."""
        with pytest.raises(error, match="max_tasks_per_child"):
            pool.Executor(1, max_tasks_per_child=value)

    def test_init_should_raise_for_a_bad_pool_option_at_construction(self):
        """Test that pool options are checked when the executor is built, not at the first submit."""
        with pytest.raises(TypeError):
            pool.Executor(1, no_such_option=1)
        with pytest.raises(pool.ConfigError):
            pool.Executor(1, admission_timeout=-1)
        with pytest.raises(TypeError, match="max_workers"):
            pool.Executor(1, spawn=2)

    def test_shutdown_should_be_safe_before_any_submit_and_twice(self):
        """Test that an executor never used shuts down at once, twice, and refuses work afterwards."""
        ex = pool.Executor(1)
        ex.shutdown()
        ex.shutdown(wait=False, cancel_futures=True)
        with pytest.raises(RuntimeError, match=r"^cannot schedule new futures after shutdown$"):
            ex.submit(pow, 2, 2)
