"""Tests for pool._routine: the decorator, options, pickling, dispatch targets."""

from __future__ import annotations

import pickle
import sys
import types

import cloudpickle
import pytest

import pool
from pool._call._dispatcher import dispatching_to
from pool._transport import _wire
from tests.integration.routines import common as routines


class Recorder:
    """A dispatcher that records tasks instead of sending them."""

    def __init__(self):
        self.tasks = []

    def call(self, task):
        self.tasks.append(task)

        async def result():
            return "recorded"

        return result()

    def generator(self, task):
        self.tasks.append(task)
        return iter(())


class TestRoutine:
    def test_routine_should_take_a_plain_function_as_plain(self):
        """Test that a plain def (a lambda too) is a routine that says it is plain; async ones are not."""
        assert pool.routine(lambda: 1).plain
        assert not routines.add.plain and not routines.count.plain

    def test_task_should_carry_plain_when_the_routine_is_plain(self):
        """Test that the task of a plain routine's call is marked plain (the worker runs it on its thread)."""
        plain = pool.routine(lambda x: x)
        assert plain.task((1,), {}).plain
        assert not routines.add.task((1, 2), {}).plain

    def test_routine_should_refuse_a_plain_generator_function_or_a_class(self):
        """Test that what cannot run as a routine is refused with a reason."""

        def gen():
            yield 1

        with pytest.raises(TypeError, match="async generator"):
            pool.routine(gen)
        with pytest.raises(TypeError, match="needs a function"):
            pool.routine(int)

    def test_routine_should_keep_the_function_metadata(self):
        """Test that name, qualname and docstring are the function's."""
        assert routines.add.__name__ == "add"
        assert routines.Counter.plus.__qualname__ == "Counter.plus"
        assert routines.accumulate.__doc__.startswith("Yields the running total")

    def test_call_should_raise_pool_closed_when_no_pool_is_active(self):
        """Test the error names the routine and says how to start a pool."""
        with pytest.raises(
            pool.PoolClosed, match=r"^add\(\) was called with no active WorkerPool.*async with pool.WorkerPool"
        ):
            routines.add(1, 2)

    async def test_call_should_go_to_the_innermost_dispatcher(self):
        """Test that the current dispatcher gets a task describing the call."""
        outer, inner = Recorder(), Recorder()
        with dispatching_to(outer):
            with dispatching_to(inner):
                assert await routines.add(1, 2) == "recorded"
            routines.count(3)
        (task,) = inner.tasks
        assert (task.name, task.generator, task.timeout) == ("add", False, None)
        assert outer.tasks[0].generator is True

    def test_options_should_apply_per_call_and_validate(self):
        """Test per-call overrides and their validation."""
        recorder = Recorder()
        with dispatching_to(recorder):
            routines.add.options(timeout=2.5, queue=pool.Queue("db", concurrency=3, total=5), key="tenant-1")(
                1, 2
            ).close()
        (task,) = recorder.tasks
        assert (task.timeout, task.queue, task.concurrency, task.total, task.key) == (2.5, "db", 3, 5, "tenant-1")
        with pytest.raises(ValueError, match="timeout: expected seconds > 0"):
            routines.add.options(timeout=0)
        with pytest.raises(TypeError, match="timeout: expected seconds > 0"):
            routines.add.options(timeout="1")
        with pytest.raises(TypeError):
            routines.add.options(retry=3)  # an unknown option
        with pytest.raises(ValueError, match="retries: expected an int >= 0"):
            routines.add.options(retries=-1)
        with pytest.raises(TypeError, match="retry_on: expected an exception type"):
            routines.add.options(retry_on=(int,))
        assert routines.add.options(retry_on=KeyError).call_options.retry_on == (KeyError,)
        with pytest.raises(ValueError, match="dispatch_deadline: expected seconds > 0"):
            routines.add.options(dispatch_deadline=0)
        with pytest.raises(TypeError, match=r"queue: expected a pool\.Queue"):
            routines.add.options(queue="db")
        with pytest.raises(ValueError, match="a concurrency key needs a queue"):
            routines.add.options(key="tenant-1")

    def test_routine_should_pickle_by_reference_when_importable(self):
        """Test that importable routines cross as a name, not as code."""
        blob = pickle.dumps(routines.add)
        assert pickle.loads(blob) is routines.add
        assert len(blob) < 100

    def test_routine_should_pickle_by_value_when_not_importable(self):
        """Test that a routine defined in a function still crosses (by value)."""

        @pool.routine
        async def local(x):
            return x * 2

        _, blob = local.code()
        restored = pickle.loads(blob)
        assert restored is not local
        assert restored.__wrapped__.__code__.co_code == local.__wrapped__.__code__.co_code

    def test_variant_should_share_the_code_of_its_base(self):
        """Test that .options() variants ship the same routine digest (one blob per stream)."""
        variant = routines.add.options(timeout=1)
        assert variant.task((1, 2), {}).digest == routines.add.task((1, 2), {}).digest

    def test_method_routine_should_bind_its_instance(self):
        """Test that a method routine passes the instance as its first argument."""
        recorder = Recorder()
        counter = routines.Counter(5)
        with dispatching_to(recorder):
            counter.plus(1).close()
        (task,) = recorder.tasks
        args, _kwargs = pool._transport._wire.unpack_args(task.args, task.name)
        assert args[0].start == 5 and args[1:] == (1,)


class TestByValue:
    """A module registered with ``cloudpickle.register_pickle_by_value`` (or a package above it)."""

    @pytest.fixture
    def package(self, monkeypatch):
        top, sub = types.ModuleType("lp_probe_pkg"), types.ModuleType("lp_probe_pkg.sub")
        top.__path__ = []
        monkeypatch.setitem(sys.modules, "lp_probe_pkg", top)
        monkeypatch.setitem(sys.modules, "lp_probe_pkg.sub", sub)

        async def double(x):
            return 2 * x

        double.__module__, double.__qualname__ = "lp_probe_pkg.sub", "double"
        sub.double = pool.routine(double)
        yield top, sub
        if "lp_probe_pkg" in cloudpickle.list_registry_pickle_by_value():
            cloudpickle.unregister_pickle_by_value(top)

    def test_a_routine_should_go_by_reference_until_its_package_is_registered_by_value(self, package):
        top, sub = package
        assert pickle.loads(cloudpickle.dumps(sub.double)) is sub.double  # by name: the worker imports it
        cloudpickle.register_pickle_by_value(top)
        assert _wire.by_value("lp_probe_pkg.sub") and _wire.by_value("lp_probe_pkg")
        assert not _wire.by_value("lp_probe_pkg_other") and not _wire.by_value("lp_probe")
        copy = pickle.loads(cloudpickle.dumps(sub.double))
        assert copy is not sub.double and copy.__qualname__ == "double"


def test_schedule_options_should_refuse_bad_input_in_one_line():
    """Test delay/run_at/priority/connection: a naive datetime, a negative delay... fail where they are written."""
    import datetime

    from tests.integration.routines import common as routines

    for changes, error, message in [
        ({"delay": -1}, ValueError, "delay: expected seconds >= 0, got -1"),
        ({"delay": float("nan")}, ValueError, "delay: expected seconds >= 0"),
        ({"delay": "5"}, TypeError, "delay: expected seconds >= 0"),
        ({"run_at": datetime.datetime(2027, 1, 1)}, ValueError, "run_at: expected an aware datetime .* naive"),
        ({"run_at": "2027-01-01"}, TypeError, "run_at: expected an aware datetime"),
        ({"run_at": datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC), "delay": 3}, ValueError, "not both"),
        ({"priority": 1.5}, TypeError, "priority: expected an int"),
        ({"priority": True}, TypeError, "priority: expected an int"),
        ({"connection": object()}, TypeError, "connection: expected an asyncpg connection"),
    ]:
        with pytest.raises(error, match=message) as info:
            routines.add.options(**changes)
        assert "\n" not in str(info.value)
    at = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)
    options = routines.add.options(run_at=at, priority=-3).call_options
    assert (options.run_at, options.priority, options.delay) == (at, -3, 0.0)
    assert routines.add.options(priority=7).task((1, 2), {}).priority == 7


def test_call_should_raise_config_error_when_an_option_is_for_jobs_only():
    """Test that a call with delay/run_at refuses in one line instead of running now (only submit honours them)."""
    import datetime

    at = datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)
    recorder = Recorder()
    with dispatching_to(recorder):
        for changes, named in [({"delay": 30}, "delay=30"), ({"run_at": at}, "run_at=")]:
            with pytest.raises(pool.ConfigError, match=f"add\\(\\): {named}.* applies to jobs only") as info:
                routines.add.options(**changes)(1, 2)
            assert "\n" not in str(info.value)
        routines.add.options(priority=2)(1, 2).close()  # an option calls share still dispatches
    assert [task.priority for task in recorder.tasks] == [2]
