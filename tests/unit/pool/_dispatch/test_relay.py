"""Tests for pool._dispatch._relay: the pool serving the calls a worker's routine makes, relayed to another worker.

A worker's stream to the pool is two real `Session`s joined in memory (the pool's end hosted by `NestedHost`);
the worker's side opens calls as `_upstream` does. The pool (`Dispatches`) is a small fake whose downstream
calls answer what the test says.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import pool
from pool._base._tasks import TaskOwner
from pool._call._calls import call_routine, open_call
from pool._call._task import CallRecord
from pool._dispatch._relay import NestedHost
from pool._transport import _wire
from pool._transport._outgoing import HandedBack, OutgoingCall
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session
from tests.unit.pool._transport.pipes import SessionPair

WAIT_S = 5.0


class Downstream:
    """A call the pool placed on another worker: its frames, then it waits; records a cancel."""

    def __init__(self, *answers: pb.Frame | BaseException) -> None:
        self.answers = list(answers)
        self.cancelled = asyncio.Event()
        self.steps: list[tuple[int, bytes]] = []

    async def receive(self) -> pb.Frame:
        if not self.answers:
            await asyncio.Event().wait()  # until cancelled
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def step(self, kind: int, value: bytes = b"") -> None:
        self.steps.append((kind, value))

    def cancel(self) -> None:
        self.cancelled.set()


class Dispatcher:
    """The pool as `NestedHost` sees it: hands out the downstream calls given, or raises."""

    def __init__(self, *downstreams: Downstream | BaseException) -> None:
        self.downstreams = list(downstreams)
        self.dispatched: list[tuple[CallRecord, OutgoingCall | None]] = []
        self.started = asyncio.Event()

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> Any:
        self.dispatched.append((task, parent))
        self.started.set()
        downstream = self.downstreams.pop(0)
        if isinstance(downstream, BaseException):
            raise downstream
        return downstream


def returned(value: Any, kind: int = pb.Outcome.RETURN) -> pb.Frame:
    return pb.Frame(outcome=pb.Outcome(kind=kind, value=_wire.dumps(value, what="v")))


class Link(SessionPair):
    """A worker's stream to the pool, in memory: ``worker`` opens calls the pool's `NestedHost` serves."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self.tasks = TaskOwner("test pool", logging.getLogger("test"))
        self.host = NestedHost(dispatcher, self.tasks)
        super().__init__(Session(odd=True, host=self.host, label="pool"), Session(odd=False, host=None, label="worker"))
        self.pool_side, self.worker = self.odd, self.even

    async def __aexit__(self, *exc: object) -> None:
        self.end()
        await super().__aexit__(*exc)
        await self.tasks.aclose()

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """The worker's side (as `_upstream.Upstream` does): open the call on the stream to the pool."""
        return await open_call(self.worker, task)

    async def call(self, task: CallRecord) -> Any:
        return await asyncio.wait_for(call_routine(self, task), WAIT_S)


def task(name: str = "child", *, digest: bytes = b"digest") -> CallRecord:
    return CallRecord(name, False, digest, b"blob", _wire.pack_args(name, (1,), {}))


class TestNestedHost:
    async def test_a_nested_call_should_be_dispatched_through_the_pool_and_its_outcome_relayed_back(self):
        """Test the round trip: the worker's call goes through the pool's dispatch, the callee's value comes back."""
        dispatcher = Dispatcher(Downstream(returned(42)))
        async with Link(dispatcher) as link:
            assert await link.call(task()) == 42
            ((sent, parent),) = dispatcher.dispatched
            assert (sent.name, sent.blob) == ("child", b"blob")  # the blob passed through, never unpickled
            assert _wire.unpack_args(sent.args, "child") == ((1,), {})
            assert parent is None  # no call of the pool's opened it

    async def test_a_nested_call_should_name_the_pools_call_whose_routine_made_it(self):
        """Test that the relay passes the calling routine's own call as the parent (for limits and deadlocks)."""
        dispatcher = Dispatcher(Downstream(returned(1)))
        async with Link(dispatcher) as link:
            outer, message = link.pool_side.open("parent")  # the pool's call that runs the calling routine
            message.routine.name = "parent"
            nested = task()
            nested.parent = outer.id
            assert await link.call(nested) == 1
            assert dispatcher.dispatched[0][1] is outer

    async def test_a_dispatch_that_fails_should_become_the_calls_exception(self):
        """Test that no worker for the nested call raises in the calling routine, as it would at top level."""
        dispatcher = Dispatcher(pool.NoWorkersAvailable("no worker accepted child()"))
        async with Link(dispatcher) as link:
            with pytest.raises(pool.NoWorkersAvailable, match="no worker accepted child"):
                await link.call(task())

    async def test_the_routine_blob_should_cross_once_and_an_unknown_digest_be_refused(self):
        """Test that a second call of one routine comes without its blob, and one never sent is refused."""
        dispatcher = Dispatcher(Downstream(returned(1)), Downstream(returned(2)))
        async with Link(dispatcher) as link:
            assert await link.call(task()) == 1
            assert await link.call(task()) == 2  # (no blob this time: the pool kept it)
            assert dispatcher.dispatched[1][0].blob == b"blob"
            link.worker.sent_digests.add(b"never-sent")  # the worker believes it sent it
            with pytest.raises(pool.WorkerBroken, match="unknown routine digest"):
                await link.call(task(digest=b"never-sent"))
            assert len(dispatcher.dispatched) == 2

    async def test_a_queued_call_handed_back_should_be_placed_again(self):
        """Test that a plain call that came back unstarted from the callee is dispatched again, unseen by the caller."""
        first = Downstream(HandedBack("worker b: handed back: it retires"))
        dispatcher = Dispatcher(first, Downstream(returned("again")))
        async with Link(dispatcher) as link:
            assert await link.call(task()) == "again"
            assert len(dispatcher.dispatched) == 2
            assert not first.cancelled.is_set()

    async def test_cancelling_the_nested_call_should_cancel_the_downstream_call(self):
        """Test that a calling routine that gives up cancels the call on the other worker."""
        downstream = Downstream()
        dispatcher = Dispatcher(downstream)
        async with Link(dispatcher) as link:
            calling = asyncio.ensure_future(link.call(task()))
            await asyncio.wait_for(dispatcher.started.wait(), WAIT_S)
            calling.cancel()
            await asyncio.wait_for(downstream.cancelled.wait(), WAIT_S)

    async def test_a_call_cancelled_before_its_accept_arrives_should_cancel_the_downstream_call(self):
        """Test that a calling routine that gives up while its call's Accept is on the way still cancels it."""
        downstream = Downstream()
        dispatcher = Dispatcher(downstream)
        async with Link(dispatcher) as link:
            link.to_even = asyncio.Queue()  # what the pool sends the worker is held: the Accept never arrives
            calling = asyncio.ensure_future(link.call(task()))
            await asyncio.wait_for(dispatcher.started.wait(), WAIT_S)
            calling.cancel()
            with pytest.raises(asyncio.CancelledError):
                await calling
            assert link.worker.open_calls == 0  # given up at once, not left for the unanswered-call timer
            await asyncio.wait_for(downstream.cancelled.wait(), WAIT_S)

    async def test_the_callers_stream_ending_should_cancel_every_relay(self):
        """Test that a worker that dies leaves no nested call of its running elsewhere."""
        downstreams = [Downstream(), Downstream()]
        dispatcher = Dispatcher(*downstreams)
        async with Link(dispatcher) as link:
            calls = [asyncio.ensure_future(link.call(task())) for _ in downstreams]
            async with asyncio.timeout(WAIT_S):
                while len(dispatcher.dispatched) < 2:
                    dispatcher.started.clear()
                    await dispatcher.started.wait()
            link.end()
            for downstream in downstreams:
                await asyncio.wait_for(downstream.cancelled.wait(), WAIT_S)
            await asyncio.gather(*calls, return_exceptions=True)

    async def test_a_generator_should_pass_steps_down_and_yields_up_until_it_stops(self):
        """Test a nested async generator: each Step goes down, each YIELD comes up, STOP ends it."""
        downstream = Downstream(returned(1, pb.Outcome.YIELD), returned(None, pb.Outcome.STOP))
        dispatcher = Dispatcher(downstream)
        async with Link(dispatcher) as link:
            generator = task("gen")
            generator.generator = True
            call = await asyncio.wait_for(link.dispatch(generator), WAIT_S)
            call.step(pb.Step.NEXT)
            first = (await asyncio.wait_for(call.receive(), WAIT_S)).outcome
            assert (first.kind, _wire.loads(first.value, what="v")) == (pb.Outcome.YIELD, 1)
            call.step(pb.Step.NEXT)
            last = (await asyncio.wait_for(call.receive(), WAIT_S)).outcome
            assert last.kind == pb.Outcome.STOP
            assert [kind for kind, _ in downstream.steps] == [pb.Step.NEXT, pb.Step.NEXT]
