"""Tests for worker set-up and recycling settings, the task limit's jitter, and the memory check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._base._exit import DRAINING_MESSAGE, EXIT_INIT_FAILED, EXIT_RETIRED
from pool._config._parse import import_path, size_bytes, size_or_zero
from pool._config._settings import PoolConfig, WorkerConfig
from pool._observe._metrics import recycled_by_reason
from pool._worker._admission import Verdict
from pool._worker._recycle import TASK_JITTER, Recycler, draw_task_limit

UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "M": 2**20}


class TestSizeBytes:
    @given(st.integers(1, 10**6), st.sampled_from(sorted(UNITS)), st.booleans())
    def test_size_should_multiply_by_its_unit(self, number, unit, lower):
        """Test that N<unit> is N times the unit, in any case."""
        text = f"{number}{unit.lower() if lower else unit}"
        assert size_bytes(text) == number * UNITS[unit]

    @pytest.mark.parametrize(
        ("text", "expected"),
        [("512MiB", 512 * 2**20), ("2GiB", 2 * 2**30), ("500MB", 500 * 10**6), ("1.5G", 3 * 2**29), ("4096", 4096)],
    )
    def test_size_should_read_the_documented_forms(self, text, expected):
        assert size_bytes(text) == expected

    @pytest.mark.parametrize("text", ["", "0", "-1MiB", "12XB", "MiB", "1 2MiB", "1e3"])
    def test_size_should_refuse_what_is_not_a_positive_size(self, text):
        with pytest.raises(ValueError):
            size_bytes(text)

    def test_size_or_zero_should_read_zero_as_no_limit(self):
        assert size_or_zero("0") == 0
        assert size_or_zero("1KiB") == 1024


class TestImportPath:
    @pytest.mark.parametrize("text", ["models:load", "a.b.c:Loader.setup", ""])
    def test_import_path_should_accept_module_colon_attribute(self, text):
        assert import_path(text) == text

    @pytest.mark.parametrize("text", ["models.load", "models:", ":load", "a b:c", "1a:b"])
    def test_import_path_should_refuse_anything_else(self, text):
        with pytest.raises(ValueError):
            import_path(text)


class TestWorkerConfig:
    def test_flags_should_set_initializer_and_limits(self):
        """Test that --initializer, --max-tasks and --max-memory parse into the worker's config."""
        config = WorkerConfig.from_argv(["--initializer", "m:f", "--max-tasks", "100", "--max-memory", "2GiB"], {})
        assert (config.initializer, config.max_tasks, config.max_memory) == ("m:f", 100, 2 * 2**30)

    def test_variables_should_set_them_too(self):
        env = {"LEAKYPOOL_INITIALIZER": "m:f", "LEAKYPOOL_MAX_TASKS": "5", "LEAKYPOOL_MAX_MEMORY": "500MB"}
        config = WorkerConfig.from_env(env)
        assert (config.initializer, config.max_tasks, config.max_memory) == ("m:f", 5, 500 * 10**6)

    @given(st.integers(0, 10**6), st.integers(0, 2**40))
    def test_config_should_round_trip_through_its_variables(self, tasks, memory):
        config = WorkerConfig(max_tasks=tasks, max_memory=memory, initializer="m:f")
        assert WorkerConfig.from_env(config.to_env()) == config

    @pytest.mark.parametrize(
        ("env", "message"),
        [
            ({"LEAKYPOOL_MAX_MEMORY": "lots"}, "LEAKYPOOL_MAX_MEMORY: expected a size in bytes"),
            ({"LEAKYPOOL_MAX_TASKS": "1.5"}, "LEAKYPOOL_MAX_TASKS: expected an integer >= 0, got '1.5'"),
            ({"LEAKYPOOL_INITIALIZER": "m.f"}, "LEAKYPOOL_INITIALIZER: expected module:function, got 'm.f'"),
        ],
    )
    def test_bad_variable_should_raise_config_error_naming_it(self, env, message):
        with pytest.raises(pool.ConfigError, match=message):
            WorkerConfig.from_env(env)


class TestPoolConfig:
    def test_memory_limit_should_take_bytes_or_a_string(self):
        """Test that max_memory_per_worker given in code reads "512MiB" as the variable would."""
        assert PoolConfig.from_env(None, max_memory_per_worker="512MiB").max_memory_per_worker == 512 * 2**20
        assert PoolConfig.from_env(None, max_memory_per_worker=1000).max_memory_per_worker == 1000
        env = {"LEAKYPOOL_MAX_MEMORY_PER_WORKER": "1GiB", "LEAKYPOOL_MAX_TASKS_PER_WORKER": "7"}
        config = PoolConfig.from_env(env)
        assert (config.max_tasks_per_worker, config.max_memory_per_worker) == (7, 2**30)

    @pytest.mark.parametrize(
        ("explicit", "message"),
        [
            ({"max_tasks_per_worker": 0}, "max_tasks_per_worker: expected an integer >= 1, got '0'"),
            ({"max_memory_per_worker": "a lot"}, "max_memory_per_worker: expected a size in bytes"),
            ({"max_memory_per_worker": -5}, "max_memory_per_worker: expected a size in bytes"),
        ],
    )
    def test_bad_limit_should_raise_config_error(self, explicit, message):
        with pytest.raises(pool.ConfigError, match=message):
            PoolConfig.from_env(None, **explicit)

    def test_pool_should_pass_its_limits_to_the_workers_it_spawns(self):
        from pool._fleet._provisioning import worker_env

        env = worker_env(None, PoolConfig(max_tasks_per_worker=9, max_memory_per_worker=2**25))
        config = WorkerConfig.from_env(env)
        assert (config.max_tasks, config.max_memory) == (9, 2**25)


class TestTaskLimit:
    @given(st.integers(1, 10**7))
    def test_limit_should_be_drawn_within_ten_percent_above(self, limit):
        """Test that each worker's limit is in [N, floor(1.1 N)] (never below what was asked)."""
        drawn = draw_task_limit(limit)
        assert limit <= drawn <= int(limit * (1 + TASK_JITTER))

    def test_limit_should_spread_workers(self):
        """Test that large limits are not all equal (workers do not recycle at once)."""
        assert len({draw_task_limit(1000) for _ in range(50)}) > 1

    def test_no_limit_should_stay_no_limit(self):
        assert draw_task_limit(0) == 0


class TestRecycler:
    def test_task_limit_should_let_exactly_its_calls_start_and_retire_at_the_last(self):
        """Test that the limit counts starts: the last one makes it due, any later one may not start."""
        recycler = Recycler(2, 0)
        assert recycler.take() and recycler.due() == ""
        assert recycler.take()
        assert "recycled after 2 calls" in recycler.due()
        assert recycler.reason == "tasks"
        assert not recycler.take()  # a call still waiting in the plain line never starts here
        assert recycler.accepted == 2

    def test_memory_should_count_only_what_was_added_since_ready(self):
        """Test that memory the worker had when ready (shared with its template) is not charged to it."""
        rss = [900 * 2**20]
        recycler = Recycler(0, 32 * 2**20, rss=lambda: rss[0])
        recycler.ready()
        rss[0] += 16 * 2**20
        assert recycler.on_end() == ""
        rss[0] += 32 * 2**20
        assert "MiB above its memory when ready" in recycler.on_end()
        assert recycler.reason == "memory"


class TestExitStatuses:
    def test_statuses_should_differ_from_success_and_a_bad_flag(self):
        assert len({0, 1, 2, EXIT_RETIRED, EXIT_INIT_FAILED}) == 5

    def test_draining_message_should_be_the_workers(self):
        """Test that the pool recognises a draining worker's Reject by the worker's own words."""
        assert Verdict.DRAINING.message.startswith(DRAINING_MESSAGE)


def test_recycled_should_list_every_reason():
    assert recycled_by_reason({"memory": 2}) == {"tasks": 0, "memory": 2, "timeout": 0}
