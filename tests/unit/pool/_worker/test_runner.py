"""Tests for pool._worker._runner: a hosted call run to its outcome, driven step by step, cancelled anywhere.

A real `RoutineRunner` on this test's loop (as a pool's own worker runs routines: callbacks posted run at once),
or with its routines on a real `LoopThread` (as a worker reached over gRPC); the service it reports to is a
recorder. Routines are this module's functions, pickled and unpickled as the wire does. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from pool._call._dispatcher import _dispatcher
from pool._call._task import CallRecord
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._worker._hosted import CANCELLED, STOP, Code, Hosted, Outcome
from pool._worker._runner import RoutineRunner
from pool._worker._threads import Hop, LoopThread
from pool._worker._upstream import Upstream, bridge, in_task

WAIT_S = 5.0

GATES: dict[str, asyncio.Event] = {}
"""Events a routine waits on, by the name it is given (an event does not pickle)."""
SEEN: list[Any] = []
"""What routines report from inside their run."""


async def double(x: int) -> int:
    return 2 * x


async def fail(message: str) -> None:
    raise ValueError(message)


async def wait_for_gate(name: str) -> str:
    await GATES[name].wait()
    return name


async def current() -> str:
    SEEN.append((_dispatcher.get(), threading.get_ident()))
    return "ok"


async def count_up(n: int):
    try:
        for i in range(n):
            received = yield i
            if received is not None:
                SEEN.append(received)
    finally:
        SEEN.append("closed")


async def survive_throw():
    try:
        yield 1
    except KeyError:
        yield "caught"


def not_a_generator_maker(x: int):
    raise RuntimeError(f"cannot make it from {x}")


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    GATES.clear()
    SEEN.clear()
    yield
    for gate in GATES.values():  # a routine still waiting ends with its test
        gate.set()
    GATES.clear()
    SEEN.clear()


class Now:
    """Runs a posted callback at once, as `_overrun.Here` does on the main thread."""

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        fn(*args)


class Host:
    """Records what the runner reports, in order, with the thread it reported on."""

    def __init__(self) -> None:
        self.reports: list[tuple[str, int, Any]] = []
        self.threads: set[int] = set()
        self.dispatchers: list[Any] = []  # the dispatcher current where each report ran
        self.changed = asyncio.Event()

    def _record(self, what: str, hosted: Hosted, outcome: Any = None) -> None:
        self.reports.append((what, hosted.id, outcome))
        self.threads.add(threading.get_ident())
        self.dispatchers.append(_dispatcher.get())
        self.changed.set()

    def finish(self, hosted: Hosted, outcome: Outcome) -> None:
        self._record("finish", hosted, outcome)

    def started(self, hosted: Hosted) -> None:
        self._record("started", hosted)

    def send(self, hosted: Hosted, outcome: Outcome) -> None:
        self._record("send", hosted, outcome)

    def park(self, hosted: Hosted) -> None:
        self._record("park", hosted)

    def unpark(self, hosted: Hosted) -> None:
        self._record("unpark", hosted)

    def of(self, what: str) -> list[Any]:
        return [outcome for kind, _, outcome in self.reports if kind == what]

    async def finished(self, count: int = 1) -> list[Outcome]:
        async with asyncio.timeout(WAIT_S):
            while len(self.of("finish")) < count:
                self.changed.clear()
                await self.changed.wait()
        return self.of("finish")

    async def sent(self, count: int) -> list[Outcome]:
        async with asyncio.timeout(WAIT_S):
            while len(self.of("send")) < count and not self.of("finish"):
                self.changed.clear()
                await self.changed.wait()
        return self.of("send")


def hosted(fn: Callable[..., Any], *args: Any, call_id: int = 2, generator: bool = False) -> Hosted:
    blob = _wire.dumps(fn, what="routine")
    name = fn.__name__
    task = CallRecord(name, generator, _wire.digest(blob), blob, _wire.pack_args(name, args, {}))
    return Hosted(object(), call_id, task, Code(blob, name))  # type: ignore[arg-type]  # the session is never used here


def value(outcome: Outcome) -> Any:
    return _wire.loads(outcome[1], what="a test's value") if outcome[1] else None


def step(kind: int, sent: Any = None) -> pb.Step:
    return pb.Step(kind=kind, value=b"" if sent is None else _wire.dumps(sent, what="a step"))


def runner_here(host: Host, user: Callable[[Coroutine[Any, Any, Any]], Any] | None = None) -> RoutineRunner:
    return RoutineRunner(host, Now(), Now(), in_task, user)


async def gate(name: str) -> asyncio.Event:
    GATES[name] = event = asyncio.Event()
    return event


class TestRoutineRunner:
    async def test_start_should_report_the_return_value_when_a_coroutine_routine_returns(self):
        """Test one call's whole run: arguments unpickled, the routine run, its value pickled into a RETURN."""
        host = Host()
        call = hosted(double, 21)
        runner_here(host).start(call)
        (outcome,) = await host.finished()
        assert outcome[0] == pb.Outcome.RETURN and value(outcome) == 42
        assert host.of("started") == []  # it ended in its first step: its Accept may leave with the outcome

    async def test_start_should_report_raise_with_the_exception_and_its_traceback_when_the_routine_raises(self):
        """Test that a routine's exception is its outcome, whatever it is, with the remote traceback."""
        host = Host()
        runner_here(host).start(hosted(fail, "boom"))
        (outcome,) = await host.finished()
        assert outcome[0] == pb.Outcome.RAISE
        error = _wire.unpack_exception(outcome[1], outcome[2], "fail")
        assert isinstance(error, ValueError) and str(error) == "boom"
        assert "ValueError: boom" in outcome[2]

    async def test_start_should_report_started_when_the_routine_awaits_in_its_first_step(self):
        """Test that a routine that awaits something tells the service it started (its Accept leaves then)."""
        host = Host()
        go = await gate("first")
        runner_here(host).start(hosted(wait_for_gate, "first"))
        async with asyncio.timeout(WAIT_S):
            while not host.of("started"):
                host.changed.clear()
                await host.changed.wait()
        assert host.of("finish") == []
        go.set()
        (outcome,) = await host.finished()
        assert value(outcome) == "first"
        assert [kind for kind, _, _ in host.reports] == ["started", "finish"]

    async def test_start_should_make_the_calls_upstream_the_dispatcher_while_the_routine_runs(self):
        """Test that a routine calling a routine sends it back up its own stream, and only while it runs."""
        host = Host()
        runner_here(host).start(hosted(current))
        await host.finished()
        ((dispatcher, _),) = SEEN
        assert isinstance(dispatcher, Upstream)
        assert host.dispatchers == [None]  # reset before its outcome is reported (from the routine's own task)

    async def test_start_should_run_user_code_inside_the_user_wrapper_when_one_is_given(self):
        """Test that every awaitable of user code goes through ``user`` (the guard released around it)."""
        host = Host()
        wrapped: list[str] = []

        async def user(coro: Coroutine[Any, Any, Any]) -> Any:
            wrapped.append(coro.__qualname__)
            return await coro

        runner_here(host, user).start(hosted(double, 1))
        await host.finished()
        assert wrapped == ["_call"]

    async def test_cancel_should_report_cancelled_when_the_routine_is_running(self):
        """Test that cancelling a running call ends it with CANCELLED, and the routine is really stopped."""
        host = Host()
        await gate("never")
        call = hosted(wait_for_gate, "never")
        runner = runner_here(host)
        runner.start(call)
        await asyncio.sleep(0)  # its first step: it waits on the gate
        runner.cancel(call)
        assert await host.finished() == [CANCELLED]
        assert call.cancelled and call.runner is not None and call.runner.done()

    async def test_cancel_should_report_cancelled_once_when_cancelled_before_the_routine_starts(self):
        """Test that a call cancelled before it starts ends CANCELLED, so it is not left in flight forever."""
        host = Host()
        call = hosted(double, 1)
        runner = runner_here(host)
        runner.cancel(call)  # nothing runs yet: only marked
        runner.start(call)
        assert await host.finished() == [CANCELLED]
        for _ in range(3):
            await asyncio.sleep(0)
        assert host.of("finish") == [CANCELLED]  # once: it never ran
        assert host.of("started") == []

    async def test_cancel_should_report_cancelled_once_when_cancelled_after_start_but_before_its_first_step(self):
        """Test that a call whose runner exists but has not taken its first step (so its coroutine never runs,
        not even its try block) ends CANCELLED, once, and never says it started."""
        host = Host()
        call = hosted(double, 1)
        runner = runner_here(host)
        runner.start(call)
        runner.cancel(call)  # the same loop turn: the runner's first step has not run
        assert await host.finished() == [CANCELLED]
        for _ in range(3):
            await asyncio.sleep(0)
        assert host.of("finish") == [CANCELLED]
        assert host.of("started") == []
        assert call.runner is not None and call.runner.cancelled()

    async def test_step_should_drive_a_generator_one_value_per_step_until_it_stops(self):
        """Test a generator routine: each NEXT or SEND yields one value, the end is STOP, the generator closed."""
        host = Host()
        call = hosted(count_up, 2, generator=True)
        runner = runner_here(host)
        runner.start(call)
        runner.step(call, step(pb.Step.NEXT))
        (first,) = await host.sent(1)
        assert first[0] == pb.Outcome.YIELD and value(first) == 0
        runner.step(call, step(pb.Step.SEND, "hello"))
        await host.sent(2)
        assert value(host.of("send")[1]) == 1 and SEEN == ["hello"]
        runner.step(call, step(pb.Step.NEXT))
        assert await host.finished() == [STOP]
        assert SEEN == ["hello", "closed"]

    async def test_step_should_stop_a_generator_when_the_step_is_close(self):
        """Test that a CLOSE step ends the generator (its finally runs) with STOP."""
        host = Host()
        call = hosted(count_up, 5, generator=True)
        runner = runner_here(host)
        runner.start(call)
        runner.step(call, step(pb.Step.NEXT))
        await host.sent(1)
        runner.step(call, step(pb.Step.CLOSE))
        assert await host.finished() == [STOP]
        assert SEEN == ["closed"]

    async def test_step_should_throw_into_the_generator_when_the_step_is_throw(self):
        """Test that THROW raises inside the generator: caught, it yields on; not caught, it is the outcome."""
        host = Host()
        call = hosted(survive_throw, generator=True)
        runner = runner_here(host)
        runner.start(call)
        runner.step(call, step(pb.Step.NEXT))
        await host.sent(1)
        runner.step(call, step(pb.Step.THROW, KeyError("k")))
        await host.sent(2)
        assert value(host.of("send")[1]) == "caught"
        runner.step(call, step(pb.Step.THROW, OSError("disk")))
        (outcome,) = await host.finished()
        assert outcome[0] == pb.Outcome.RAISE
        assert isinstance(_wire.unpack_exception(outcome[1], outcome[2], "survive_throw"), OSError)

    async def test_step_should_be_ignored_when_the_call_is_a_coroutine(self):
        """Test that a stray Step for a coroutine call (which has no queue of steps) is dropped."""
        host = Host()
        call = hosted(double, 3)
        runner = runner_here(host)
        runner.step(call, step(pb.Step.NEXT))  # raises nothing
        runner.start(call)
        (outcome,) = await host.finished()
        assert value(outcome) == 6

    async def test_cancel_should_close_a_generator_waiting_for_its_next_step(self):
        """Test that a generator cancelled between steps ends CANCELLED and its finally block runs."""
        host = Host()
        call = hosted(count_up, 5, generator=True)
        runner = runner_here(host)
        runner.start(call)
        runner.step(call, step(pb.Step.NEXT))
        await host.sent(1)
        runner.cancel(call)
        assert await host.finished() == [CANCELLED]
        assert SEEN == ["closed"]

    async def test_start_should_report_raise_when_the_generator_cannot_be_made(self):
        """Test that a generator routine failing before its first value is a RAISE outcome, not a crash."""
        host = Host()
        call = hosted(not_a_generator_maker, 7, generator=True)
        runner = runner_here(host)
        runner.start(call)
        (outcome,) = await host.finished()
        assert outcome[0] == pb.Outcome.RAISE
        assert "cannot make it from 7" in outcome[2]

    async def test_start_should_run_on_the_routine_loop_and_report_on_the_io_loop_when_the_loops_differ(self):
        """Test the gRPC worker's arrangement: the routine on its own thread, every report back on the I/O loop."""
        host = Host()
        routines = LoopThread("test-routines")
        routines.start()
        try:
            loop = asyncio.get_running_loop()
            runner = RoutineRunner(host, Hop(loop), routines.hop, bridge(loop))
            runner.start(hosted(current))
            (outcome,) = await host.finished()
        finally:
            routines.stop()
        assert value(outcome) == "ok"
        ((_, ran_on),) = SEEN
        assert ran_on != threading.get_ident()
        assert host.threads == {threading.get_ident()}
