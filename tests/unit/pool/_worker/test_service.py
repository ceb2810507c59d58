"""Tests for pool._worker._service: a worker's service answering one dispatcher's stream, call by call.

A real `WorkerService`, started as a pool's own worker (routines on this test's loop, the watch thread beside
it) unless a test says otherwise, serving a real dispatching `Session` over in-memory pipes. Routines are this
module's functions, pickled as the wire does. Every wait is bounded; a routine that must not end waits on a gate
the test opens (or the stream's end cancels).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

import pytest

import pool
from backpressure import BackpressureContext
from pool._call._task import CallRecord
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import (
    FAILED_PRECONDITION,
    LATE_MESSAGE,
    MISMATCH_MESSAGE,
    RESOURCE_EXHAUSTED,
    UNAVAILABLE,
)
from pool._transport._session import Session
from pool._worker._hosted import Code, Hosted
from pool._worker._service import WorkerService
from tests.integration.support.helpers import eventually

WAIT_S = 5.0
UID = "00000000-0000-0000-0000-000000000005"

GATES: dict[str, asyncio.Event] = {}
SEEN: list[str] = []


async def double(x: int) -> int:
    return 2 * x


async def wait_for_gate(name: str) -> str:
    try:
        await GATES[name].wait()
    except asyncio.CancelledError:
        SEEN.append(f"{name} cancelled")
        raise
    return name


async def numbers(n: int):
    for i in range(n):
        yield i


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    GATES.clear()
    SEEN.clear()
    yield
    for gate in GATES.values():
        gate.set()
    GATES.clear()
    SEEN.clear()


def gate(name: str) -> asyncio.Event:
    GATES[name] = event = asyncio.Event()
    return event


def task(fn: Callable[..., Any], *args: Any, generator: bool = False) -> CallRecord:
    blob = _wire.dumps(fn, what="routine")
    name = fn.__name__
    return CallRecord(name, generator, _wire.digest(blob), blob, _wire.pack_args(name, args, {}))


class Link:
    """A dispatching session and the service, joined by in-memory pipes both ways."""

    def __init__(self, service: WorkerService) -> None:
        self.service = service
        self.rooms: list[pb.Room] = []
        self.room = asyncio.Event()
        self.caller = Session(odd=True, host=None, label="test pool", on_room=self._on_room)
        self.to_caller: asyncio.Queue[Any] = asyncio.Queue()
        self.to_worker: asyncio.Queue[Any] = asyncio.Queue()
        self.served: asyncio.Task[BaseException] | None = None
        self.dispatching: asyncio.Task[BaseException] | None = None

    def _on_room(self, room: pb.Room) -> None:
        self.rooms.append(room)
        self.room.set()

    async def __aenter__(self) -> Self:
        async def to_worker(message: pb.Frames) -> None:
            self.to_worker.put_nowait(pb.Frames.FromString(message.SerializeToString()))

        async def to_caller(message: pb.Frames) -> None:
            self.to_caller.put_nowait(pb.Frames.FromString(message.SerializeToString()))

        self.dispatching = asyncio.ensure_future(
            self.caller.run(self.to_caller.get, to_worker, lambda exc: pool.WorkerBroken(f"lost: {exc}"))
        )
        self.served = asyncio.ensure_future(self.service.serve_stream(self.to_worker.get, to_caller, "test pool"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [t for t in (self.dispatching, self.served) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def open(self, t: CallRecord):
        call, message = self.caller.open(t.name)
        t.fill(message, self.caller)
        return call

    async def answer(self, call) -> pb.Frame:
        return await asyncio.wait_for(call.receive(), WAIT_S)

    async def run(self, t: CallRecord) -> pb.Frame:
        """The call's final frame (its Reject, or its Outcome after its Accept)."""
        call = self.open(t)
        frame = await self.answer(call)
        if frame.WhichOneof("body") == "accept":
            frame = await self.answer(call)
        return frame


class Serving:
    """A started service, closed on the way out."""

    def __init__(self, **options: Any) -> None:
        options.setdefault("inline", True)
        self.service = WorkerService(uid=UID, **({"backpressure": None} | options))

    async def __aenter__(self) -> WorkerService:
        self.service.start()
        return self.service

    async def __aexit__(self, *exc: object) -> None:
        await self.service.aclose()


def result(frame: pb.Frame) -> Any:
    assert frame.WhichOneof("body") == "outcome", frame
    assert frame.outcome.kind == pb.Outcome.RETURN, frame
    return _wire.loads(frame.outcome.value, what="a test's result") if frame.outcome.value else None


def reject(frame: pb.Frame) -> pb.Reject:
    assert frame.WhichOneof("body") == "reject", frame
    return frame.reject


class TestWorkerService:
    def test_runner_should_raise_when_the_service_was_not_started(self):
        """Test that nothing can reach a runner before `start` made one."""
        service = WorkerService(uid=UID, backpressure=None)
        with pytest.raises(RuntimeError, match="not started"):
            service.runner  # noqa: B018 - the property raises

    async def test_on_call_should_accept_run_and_answer_the_outcome_when_there_is_room(self):
        """Test one call's round trip: accepted, run, its value answered, the worker idle again."""
        async with Serving(capacity=4) as service, Link(service) as link:
            assert result(await link.run(task(double, 21))) == 42
            assert result(await link.run(task(double, 5))) == 10  # the routine's blob crossed once: known by digest
            await eventually(lambda: service.admission.in_flight == 0, timeout=WAIT_S, interval=0.005)
            state = service.state()
            assert (state.uid, state.capacity, state.in_flight, state.accepting) == (UID, 4, 0, True)

    async def test_on_call_should_run_routines_on_their_own_loop_when_not_inline(self):
        """Test the gRPC worker's arrangement (a routine loop of its own): the same answers."""
        async with Serving(inline=False) as service, Link(service) as link:
            assert result(await link.run(task(double, 4))) == 8

    async def test_on_call_should_reject_with_failed_precondition_when_the_routine_digest_is_unknown(self):
        """Test that a call naming a routine this stream never sent is refused, not guessed at."""
        async with Serving() as service, Link(service) as link:
            t = task(double, 1)
            link.caller.sent_digests.add(t.digest)  # as if it had crossed already: the blob is left out
            refused = reject(await link.run(t))
            assert refused.code == FAILED_PRECONDITION
            assert "unknown routine digest for double()" in refused.message

    async def test_on_call_should_reject_busy_and_later_send_room_when_backpressure_says_no(self):
        """Test a worker at its limit: BUSY with its counts, then a Room frame once the running call ends."""

        def one_at_a_time(context: BackpressureContext) -> bool:
            return context.active_task_count >= 1

        async with Serving(backpressure=one_at_a_time, capacity=1) as service, Link(service) as link:
            go = gate("first")
            first = link.open(task(wait_for_gate, "first"))
            assert (await link.answer(first)).WhichOneof("body") == "accept"
            refused = reject(await link.run(task(double, 1)))
            assert refused.code == RESOURCE_EXHAUSTED
            assert (refused.in_flight, refused.capacity) == (1, 1)
            assert link.rooms == []
            go.set()
            assert result(await link.answer(first)) == "first"
            await asyncio.wait_for(link.room.wait(), WAIT_S)
            assert result(await link.run(task(double, 2))) == 4

    async def test_on_call_should_reject_unavailable_and_log_when_the_hook_raises(self, caplog):
        """Test that a hook that raises fails closed but transient (UNAVAILABLE), with the error logged."""

        def broken(context: BackpressureContext) -> bool:
            raise ZeroDivisionError("hook bug")

        async with Serving(backpressure=broken) as service, Link(service) as link:
            refused = reject(await link.run(task(double, 1)))
            assert refused.code == UNAVAILABLE
            assert "hook failed" in refused.message
            assert "backpressure hook" in caplog.text and "ZeroDivisionError: hook bug" in caplog.text

    @pytest.mark.parametrize("rejects", [False, True])
    async def test_on_call_should_follow_an_async_hook_when_it_answers(self, rejects):
        """Test that an async hook's answer, once awaited, decides the call (run it, or turn it away BUSY)."""
        answered = asyncio.Event()

        async def vet(context: BackpressureContext) -> bool:
            await asyncio.sleep(0)
            answered.set()
            return rejects

        async with Serving(backpressure=vet) as service, Link(service) as link:
            frame = await link.run(task(double, 3))
            assert answered.is_set()
            if rejects:
                assert reject(frame).code == RESOURCE_EXHAUSTED
            else:
                assert result(frame) == 6
            assert service.admission.vetting == 0

    async def test_on_call_should_reject_unavailable_naming_why_when_the_worker_drains(self):
        """Test that a draining worker turns new calls away, saying why, while its running call finishes."""
        async with Serving() as service, Link(service) as link:
            go = gate("running")
            running = link.open(task(wait_for_gate, "running"))
            assert (await link.answer(running)).WhichOneof("body") == "accept"
            draining = service.drain("testing the drain", None)  # no grace: it waits for the running call
            refused = reject(await link.run(task(double, 1)))
            assert refused.code == UNAVAILABLE
            assert refused.message == "worker is draining (testing the drain)"
            go.set()
            assert result(await link.answer(running)) == "running"
            await asyncio.wait_for(draining, WAIT_S)
            assert service.done.is_set()

    async def test_on_call_should_decline_a_job_call_past_its_start_by_time_unstarted_and_not_as_full(self):
        """Test the worker-side lease fence (issue 54): a call whose start-by time passed is declined before it
        starts (UNAVAILABLE, saying how late), one still in time runs."""
        async with Serving() as service, Link(service) as link:
            late = task(double, 1)
            late.start_by = time.time() - 0.25
            refused = reject(await link.run(late))
            assert refused.code == UNAVAILABLE and refused.message.startswith(LATE_MESSAGE)
            assert refused.capacity == 0  # not "full": the pool does not wait for room from it
            assert service.admission.in_flight == 0
            in_time = task(double, 2)
            in_time.start_by = time.time() + 60
            assert result(await link.run(in_time)) == 4

    async def test_on_call_should_decline_a_call_whose_start_by_time_passed_while_an_async_hook_vetted_it(self):
        """Test the check as the call leaves the worker's vetting (its line): late by then, it never starts."""
        vetted = asyncio.Event()

        async def slow(context: BackpressureContext) -> bool:
            await asyncio.sleep(0.3)
            vetted.set()
            return False

        async with Serving(backpressure=slow) as service, Link(service) as link:
            t = task(double, 3)
            t.start_by = time.time() + 0.1  # in time on arrival, late once vetted
            refused = reject(await link.run(t))
            assert vetted.is_set() and refused.message.startswith(LATE_MESSAGE)
            assert service.admission.in_flight == 0

    @pytest.mark.parametrize(
        ("own", "call", "runs"), [("v1", "v1", True), ("v1", "v2", False), ("", "v2", False), ("v1", "", True)]
    )
    async def test_on_call_should_run_only_calls_of_its_build_or_naming_none(self, own, call, runs):
        """Test the build check (issue 54): a call of another build is declined (UNAVAILABLE, naming both builds,
        not full); a call that names no build runs anywhere."""
        async with Serving(build=own) as service, Link(service) as link:
            t = task(double, 5)
            t.build = call
            frame = await link.run(t)
            if runs:
                assert result(frame) == 10
            else:
                refused = reject(frame)
                assert refused.code == UNAVAILABLE and refused.capacity == 0
                assert (
                    refused.message
                    == f"{MISMATCH_MESSAGE}: it runs build {own or '(none)'}, the call is of build {call}"
                )
            assert service.state().build == own

    async def test_on_step_should_cancel_the_routine_when_the_dispatcher_cancels(self):
        """Test that a CANCEL step stops the running routine, and the call counts out."""
        async with Serving() as service, Link(service) as link:
            gate("forever")
            call = link.open(task(wait_for_gate, "forever"))
            assert (await link.answer(call)).WhichOneof("body") == "accept"
            await call.abort(WAIT_S)
            assert SEEN == ["forever cancelled"]
            await eventually(lambda: service.admission.in_flight == 0, timeout=WAIT_S, interval=0.005)

    async def test_on_step_should_drive_a_generator_when_the_dispatcher_steps_it(self):
        """Test that NEXT steps reach a generator routine, one value each, then its end."""
        async with Serving() as service, Link(service) as link:
            call = link.open(task(numbers, 2, generator=True))
            assert (await link.answer(call)).WhichOneof("body") == "accept"
            kinds = []
            for _ in range(3):
                call.step(pb.Step.NEXT)
                kinds.append((await link.answer(call)).outcome.kind)
            assert kinds == [pb.Outcome.YIELD, pb.Outcome.YIELD, pb.Outcome.STOP]

    async def test_on_session_end_should_cancel_its_calls_when_the_dispatcher_goes(self):
        """Test that a dispatcher whose stream ends leaves nothing running here for it."""
        async with Serving() as service:
            gate("orphan")
            async with Link(service) as link:
                call = link.open(task(wait_for_gate, "orphan"))
                assert (await link.answer(call)).WhichOneof("body") == "accept"
            await eventually(lambda: service.admission.in_flight == 0, timeout=WAIT_S, interval=0.005)
            assert SEEN == ["orphan cancelled"]

    async def test_serve_stream_should_log_and_return_the_reason_when_the_frames_are_not_our_protocol(self, caplog):
        """Test that a stream ended by bytes that do not decode is reported, and its reason handed to the transport."""

        async def garbage() -> Any:
            raise ValueError("not a frame")

        async def nowhere(message: pb.Frames) -> None:
            pass

        async with Serving() as service:
            reason = await asyncio.wait_for(service.serve_stream(garbage, nowhere, "a stranger"), WAIT_S)
            assert isinstance(reason, ValueError)
            assert "closing the stream of a stranger: undecodable frames (not a frame)" in caplog.text
            assert "streams=0" in repr(service)

    async def test_serve_stream_should_not_log_when_the_dispatcher_hung_up(self, caplog):
        """Test that a dispatcher leaving is an ordinary end, not a protocol fault."""

        async def hung_up() -> Any:
            return None  # the transport's end of stream

        async def nowhere(message: pb.Frames) -> None:
            pass

        async with Serving() as service:
            reason = await asyncio.wait_for(service.serve_stream(hung_up, nowhere, "a pool"), WAIT_S)
            assert isinstance(reason, ConnectionError)
            assert "undecodable" not in caplog.text

    async def test_stop_should_drain_with_the_grace_asked_and_report_not_accepting(self):
        """Test a dispatcher's Stop: the worker drains and its reply already says it no longer accepts."""
        async with Serving() as service:
            state = service.stop(pb.StopRequest(grace=1.0))
            assert not state.accepting
            assert service.exit_reason == "asked to stop by a dispatcher"
            await asyncio.wait_for(service.done.wait(), WAIT_S)

    async def test_park_should_tell_turned_away_dispatchers_there_is_room_when_a_call_waits_on_a_nested_one(self):
        """Test that a call awaiting a nested call frees its slot once (not per nested call), and counts again after."""
        rooms: list[int] = []

        class Turned:
            def room(self, in_flight: int, capacity: int, *signals: Any) -> None:
                rooms.append(in_flight)

        service = WorkerService(uid=UID, backpressure=None, capacity=2)
        hosted = Hosted(Turned(), 2, task(double, 1), Code(b"", "double"))  # type: ignore[arg-type]
        service.admission.admit()
        service.admission.turned_away(hosted.session)
        service.park(hosted)
        service.admission.turned_away(hosted.session)
        service.park(hosted)  # a second nested call at once: still one parked
        assert rooms == [1]
        assert service.admission.parked == 1
        service.unpark(hosted)
        assert service.admission.parked == 1
        service.unpark(hosted)
        assert (service.admission.parked, hosted.nested) == (0, 0)
        await service.aclose()

    async def test_finish_should_count_the_call_in_the_metrics_when_they_are_served(self):
        """Test that a worker serving metrics counts each call's end and each refusal, by kind."""

        class Metrics:
            def __init__(self) -> None:
                self.seen: list[tuple[str, Any]] = []

            def ended(self, kind: int, took: float) -> None:
                self.seen.append(("ended", kind))

            def refused(self, verdict: str) -> None:
                self.seen.append(("refused", verdict))

        def only_doubles(context: BackpressureContext) -> bool:
            return context.task.name != "double"

        async with Serving(backpressure=only_doubles) as service, Link(service) as link:
            metrics = Metrics()
            service.metrics = metrics  # type: ignore[assignment]
            result(await link.run(task(double, 1)))
            reject(await link.run(task(wait_for_gate, "never run")))
            assert metrics.seen == [("ended", pb.Outcome.RETURN), ("refused", "BUSY")]
