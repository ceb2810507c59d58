"""Tests for pool._call._calls.open_call: a stream that fails before the answer, on a gRPC-like stream (in memory).

A call whose frame never left is `WorkerRejected` (the pool tries another
worker); once it left, the worker may have started it, so a worker that is
gone makes it accepted-then-lost (`WorkerBroken` for its caller), never a
second run elsewhere.
"""

from __future__ import annotations

import asyncio
from typing import Self

import grpc
import pytest

import pool
from pool._call._calls import call_outcome, open_call
from pool._call._task import CallRecord
from pool._transport import _wire
from pool._transport._outgoing import HandedBack
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session


class Stream:
    """The dispatcher's end of a stream with no ``write_now`` (as gRPC): each write waits for `let_one_through`."""

    def __init__(self, code: str = "UNAVAILABLE") -> None:
        self.session = Session(odd=True, host=None, label="worker w")
        self.inbound: asyncio.Queue = asyncio.Queue()
        self.writes: list[pb.Frames] = []
        self.through = asyncio.Semaphore(0)
        self.written = asyncio.Event()
        self._code = code
        self._task: asyncio.Future | None = None

    async def _write(self, batch: pb.Frames) -> None:
        self.writes.append(batch)
        await self.through.acquire()
        self.written.set()

    def let_one_through(self) -> None:
        self.through.release()

    def end(self) -> None:
        """The worker is gone (its process died): the stream ends under the dispatcher."""
        self.inbound.put_nowait(grpc.aio.EOF)

    async def __aenter__(self) -> Self:
        lost = lambda exc: pool.WorkerBroken(f"lost worker w: {exc}", self._code)
        self._task = asyncio.ensure_future(self.session.run(self.inbound.get, self._write, lost))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def ended(self) -> None:
        await asyncio.wait_for(asyncio.shield(self._task), 5)


def task(name: str = "f") -> CallRecord:
    return CallRecord(name, False, b"digest", b"blob", b"")


async def test_a_call_that_left_should_be_lost_after_accepting_when_the_worker_dies_before_answering():
    """Test that the worker that may have started it is not replaced by another: the caller gets WorkerBroken."""
    async with Stream() as stream:
        opening = asyncio.ensure_future(open_call(stream.session, task()))
        stream.let_one_through()
        await asyncio.wait_for(stream.written.wait(), 5)  # the Call frame left
        stream.end()
        call = await asyncio.wait_for(opening, 5)  # not WorkerRejected: the pool must not offer it elsewhere
        with pytest.raises(pool.WorkerBroken, match="lost worker w") as info:
            await asyncio.wait_for(call.receive(), 5)
        assert info.value.code == "UNAVAILABLE"


async def test_a_call_opened_while_another_batch_was_written_should_be_rejected_if_its_own_never_left():
    """Test that a call in the batch after the one in flight does not count as sent when that one is written."""
    async with Stream() as stream:
        first = asyncio.ensure_future(open_call(stream.session, task("first")))
        async with asyncio.timeout(5):
            while not stream.writes:  # the first batch is being written
                await asyncio.sleep(0)
        second = asyncio.ensure_future(open_call(stream.session, task("second")))
        await asyncio.sleep(0)  # the second call opens (its frame waits for the next batch)
        stream.let_one_through()  # the first batch is written; the second never will be
        await asyncio.wait_for(stream.written.wait(), 5)
        stream.end()
        with pytest.raises(pool.WorkerRejected, match="lost worker w"):
            await asyncio.wait_for(second, 5)
        call = await asyncio.wait_for(first, 5)
        with pytest.raises(pool.WorkerBroken):
            await asyncio.wait_for(call.receive(), 5)
        assert [[frame.call.routine.name for frame in batch.frames] for batch in stream.writes] == [
            ["first"],
            ["second"],
        ]


async def test_a_hard_status_after_the_call_left_should_be_broken_at_once():
    """Test that a peer refusing the stream itself (not a leakypool worker) is WorkerBroken from open_call: evict, move on."""
    async with Stream(code="UNIMPLEMENTED") as stream:
        opening = asyncio.ensure_future(open_call(stream.session, task()))
        stream.let_one_through()
        await asyncio.wait_for(stream.written.wait(), 5)
        stream.end()
        with pytest.raises(pool.WorkerBroken) as info:
            await asyncio.wait_for(opening, 5)
        assert info.value.code == "UNIMPLEMENTED"


async def test_the_answer_watch_should_let_go_of_a_session_once_it_failed():
    """Test that the one timer per stream is cancelled when the stream ends, not left holding the dead session."""
    async with Stream() as stream:
        opening = asyncio.ensure_future(open_call(stream.session, task()))
        async with asyncio.timeout(5):
            while stream.session.watch is None:
                await asyncio.sleep(0)
        timer = stream.session.watch._timer
        assert timer is not None and not timer.cancelled()
        stream.end()
        await stream.ended()
        await asyncio.gather(opening, return_exceptions=True)
        assert timer.cancelled()  # its callback (and the session it holds) is gone from the loop now
        assert stream.session.watch is None


class _Placed:
    """A call a worker accepted: it comes back unstarted (``HandedBack``) or ends with ``frame``."""

    def __init__(self, answer: pb.Frame | BaseException) -> None:
        self._answer = answer

    async def receive(self) -> pb.Frame:
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer

    async def abort(self, timeout: float) -> None:  # pragma: no cover - never reached here
        raise AssertionError("nothing to abort")


class _Dispatcher:
    """Places each call at once; the first comes back handed back, the next ones return None."""

    def __init__(self) -> None:
        self.arrivals: list[int | None] = []
        self._first = True

    async def dispatch(self, task: CallRecord) -> _Placed:
        self.arrivals.append(task.arrival)
        task.arrival = 42 if task.arrival is None else task.arrival  # (as Admission.admit numbers it)
        if self._first:
            self._first = False
            return _Placed(HandedBack("worker w handed f() back: draining"))
        frame = pb.Frame(id=1)
        frame.outcome.kind = pb.Outcome.RETURN
        frame.outcome.value = _wire.dumps(None, what="the result")
        return _Placed(frame)


async def test_call_outcome_should_place_a_call_handed_back_again_keeping_its_place_in_the_queue():
    """Test that a handback places the same task again, with the arrival it was given (a new call: a new one)."""
    dispatcher, once = _Dispatcher(), task()
    once.arrival = 7  # left over from an earlier call of the same task object
    assert await call_outcome(dispatcher, once) == (True, None)  # type: ignore[arg-type]
    assert dispatcher.arrivals == [None, 42]
