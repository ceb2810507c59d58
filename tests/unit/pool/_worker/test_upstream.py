"""Tests for pool._worker._upstream: a routine's nested calls, carried to where the stream lives and back.

Two real `Session`s joined in memory stand for the worker's stream to its dispatcher; the dispatcher's end is
a recording host the test answers by hand. The carries run on real loops (this one, a `LoopThread`'s).
"""

from __future__ import annotations

import asyncio
import threading

import pytest

import pool
from pool._call._task import CallRecord
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session
from pool._worker._hosted import Code, Hosted
from pool._worker._threads import LoopThread
from pool._worker._upstream import BridgedGenerator, Upstream, bridge, in_task
from tests.unit.pool._transport.pipes import SessionPair

WAIT_S = 5.0


class Dispatcher:
    """The dispatcher's end of the stream (a `CallHost`): records the calls a worker opens on it."""

    def __init__(self) -> None:
        self.calls: asyncio.Queue[tuple[Session, pb.Frame]] = asyncio.Queue()

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        self.calls.put_nowait((session, frame))

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        pass

    def on_session_end(self, session: Session) -> None:
        pass


class Link(SessionPair):
    """A worker's stream to its dispatcher, in memory: ``worker`` opens even-numbered calls on it."""

    def __init__(self) -> None:
        self.dispatcher = Dispatcher()
        super().__init__(
            Session(odd=True, host=self.dispatcher, label="pool"), Session(odd=False, host=None, label="worker")
        )
        self.pool_side, self.worker = self.odd, self.even

    async def __aexit__(self, *exc: object) -> None:
        self.end()
        await super().__aexit__(*exc)

    async def next_call(self) -> tuple[Session, pb.Frame]:
        return await asyncio.wait_for(self.dispatcher.calls.get(), WAIT_S)


class Host:
    """The worker service as the upstream sees it: records park and unpark."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []

    def park(self, hosted: Hosted) -> None:
        self.events.append(("park", hosted.id))

    def unpark(self, hosted: Hosted) -> None:
        self.events.append(("unpark", hosted.id))

    def finish(self, hosted, outcome) -> None: ...
    def started(self, hosted) -> None: ...
    def send(self, hosted, outcome) -> None: ...


def task(name: str = "child", *, traceparent: str = "") -> CallRecord:
    return CallRecord(name, False, b"digest", b"blob", _wire.pack_args(name, (), {}), traceparent=traceparent)


class TestUpstream:
    async def test_call_should_open_the_call_on_the_callers_stream_and_return_its_value_with_the_caller_parked(self):
        """Test a nested call's round trip: it names its parent, carries the trace context, and parks the caller."""
        async with Link() as link:
            host = Host()
            parent = Hosted(link.worker, 7, task("parent", traceparent="00-abc-def-01"), Code(b"", "parent"))
            upstream = Upstream(host, parent, in_task)
            calling = asyncio.ensure_future(upstream.call(task()))
            session, frame = await link.next_call()
            assert frame.id % 2 == 0  # a call the worker opened
            assert (frame.call.routine.name, frame.call.parent) == ("child", 7)
            assert frame.call.traceparent == "00-abc-def-01"  # untraced here: passed on as it arrived
            assert host.events == [("park", 7)]  # waiting: it stops counting against backpressure
            session.accept(frame.id)
            session.outcome(frame.id, pb.Outcome.RETURN, _wire.dumps(42, what="v"))
            assert await asyncio.wait_for(calling, WAIT_S) == 42
            assert host.events == [("park", 7), ("unpark", 7)]

    async def test_call_should_raise_the_nested_routines_exception_and_unpark(self):
        """Test that the routine's own exception reaches the caller, and the caller counts again."""
        async with Link() as link:
            host = Host()
            upstream = Upstream(host, Hosted(link.worker, 3, task("parent"), Code(b"", "parent")), in_task)
            calling = asyncio.ensure_future(upstream.call(task()))
            session, frame = await link.next_call()
            session.accept(frame.id)
            session.outcome(frame.id, pb.Outcome.RAISE, *_wire.pack_exception(KeyError("nope"), "child"))
            with pytest.raises(KeyError, match="nope"):
                await asyncio.wait_for(calling, WAIT_S)
            assert host.events == [("park", 3), ("unpark", 3)]

    async def test_call_should_unpark_when_the_dispatcher_rejects_it(self):
        """Test that a nested call refused by the dispatcher still unparks its caller."""
        async with Link() as link:
            host = Host()
            upstream = Upstream(host, Hosted(link.worker, 5, task("parent"), Code(b"", "parent")), in_task)
            calling = asyncio.ensure_future(upstream.call(task()))
            session, frame = await link.next_call()
            session.reject(frame.id, 9, "refused for the test")
            with pytest.raises(pool.WorkerBroken):
                await asyncio.wait_for(calling, WAIT_S)
            assert host.events == [("park", 5), ("unpark", 5)]


class TestInTask:
    async def test_in_task_should_run_the_coroutine_in_a_task_of_its_own(self):
        """Test that the step runs outside the caller's task (never inside the routine's user code)."""
        caller = asyncio.current_task()

        async def where() -> asyncio.Task | None:
            return asyncio.current_task()

        ran_in = await in_task(where())
        assert ran_in is not None and ran_in is not caller

    async def test_in_task_should_cancel_the_coroutine_and_raise_at_once_when_the_caller_is_cancelled(self):
        """Test that cancelling the calling routine cancels the nested step too."""
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def forever() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        caller = asyncio.ensure_future(in_task(forever()))
        await asyncio.wait_for(started.wait(), WAIT_S)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.wait_for(cancelled.wait(), WAIT_S)


class TestBridge:
    async def test_bridge_should_run_the_coroutine_on_the_other_loop_and_return_its_result(self):
        """Test the carry of a gRPC worker: the step runs on the I/O loop's thread, its result comes back here."""
        thread = LoopThread("io-loop")
        thread.start()
        try:

            async def where() -> str:
                return threading.current_thread().name

            assert await asyncio.wait_for(bridge(thread.loop)(where()), WAIT_S) == "io-loop"
        finally:
            thread.stop()

    async def test_bridge_should_cancel_the_coroutine_there_when_the_caller_is_cancelled(self):
        """Test that cancelling the routine's wait cancels the step on the other loop."""
        thread = LoopThread("io-loop")
        thread.start()
        started, cancelled = threading.Event(), threading.Event()

        async def forever() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        try:
            caller = asyncio.ensure_future(bridge(thread.loop)(forever()))
            assert await asyncio.to_thread(started.wait, WAIT_S)
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            assert await asyncio.to_thread(cancelled.wait, WAIT_S)
        finally:
            thread.stop()


class TestBridgedGenerator:
    async def test_steps_should_each_be_carried_and_wrapped_by_around(self):
        """Test that each step of the generator (next, send, throw, close) goes through the carry and ``around``."""
        log: list[str] = []

        async def inner():
            got = yield 1
            log.append(f"got {got}")
            try:
                yield 2
            except ValueError:
                yield 3

        async def around(step):
            log.append("park")
            try:
                return await step
            finally:
                log.append("unpark")

        carried = 0

        async def carry(coro):
            nonlocal carried
            carried += 1
            return await in_task(coro)

        generator = BridgedGenerator(carry, inner(), around=around)  # type: ignore[arg-type]
        assert generator.__aiter__() is generator
        assert await generator.__anext__() == 1
        assert await generator.asend("x") == 2
        assert await generator.athrow(ValueError) == 3
        await generator.aclose()
        assert carried == 4
        assert log == ["park", "unpark", "park", "got x", "unpark", "park", "unpark", "park", "unpark"]

    async def test_async_for_should_end_with_the_generator_without_around(self):
        """Test ``async for`` over a bridged generator with no ``around``."""

        async def inner():
            for i in range(3):
                yield i

        assert [i async for i in BridgedGenerator(in_task, inner())] == [0, 1, 2]  # type: ignore[arg-type]
