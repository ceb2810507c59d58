"""Tests for pool._worker._plain_calls: a worker's plain calls as its loop handles them.

A real `PlainLine` (its thread runs the calls), a real `WorkerAdmission` and `Lifecycle`; the service's books
and the session are small recorders. Every wait is bounded; a call that blocks waits on an event the test sets.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pool._base._tasks import TaskOwner
from pool._call._task import CallRecord
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import UNAVAILABLE
from pool._worker import _plain_calls
from pool._worker._admission import WorkerAdmission
from pool._worker._hosted import CANCELLED, Code, Hosted
from pool._worker._lifecycle import Lifecycle
from pool._worker._plain_calls import HANDED_BACK, PlainCalls
from pool._worker._recycle import Recycler

WAIT_S = 5.0


class Session:
    """Records what the loop answers and what the plain thread writes (from any thread)."""

    def __init__(self, *, on_wire: bool = True) -> None:
        self.answers: list[tuple[Any, ...]] = []  # the loop's: accept, reject, outcome
        self.written: list[tuple[str, int]] = []  # the thread's frames: (body, id)
        self.on_wire = on_wire
        self.failure: BaseException | None = None
        self.answered = asyncio.Event()  # set on each answer of the loop's

    def accept(self, call_id: int, hold_s: float = 0.0, *, queued: bool = False) -> None:
        self.answers.append(("accept", call_id, queued))
        self.answered.set()

    async def until_answered(self, answer: tuple[Any, ...]) -> None:
        """Wait (bounded) until the loop has given ``answer``."""
        async with asyncio.timeout(WAIT_S):
            while answer not in self.answers:
                self.answered.clear()
                await self.answered.wait()

    def reject(self, call_id: int, code: int, message: str) -> None:
        self.answers.append(("reject", call_id, code, message))

    def outcome(self, call_id: int, kind: int, value: bytes = b"", traceback: str = "") -> None:
        self.answers.append(("outcome", call_id, kind, traceback))

    def accepted_on_wire(self) -> bool:
        return self.on_wire

    def write_from_thread(self, frames: pb.Frames, *, land: bool = False) -> bool:
        for frame in frames.frames:
            body = frame.WhichOneof("body")
            self.written.append(("accept(queued)" if body == "accept" and frame.accept.queued else body, frame.id))
        return True


class Worker:
    """The service's side of plain calls: its books (as `WorkerService.finish` and `book` keep them)."""

    def __init__(self, depth: int = 2) -> None:
        self.admission = WorkerAdmission(None)
        self.tasks = TaskOwner("test worker", logging.getLogger("test"))
        self.lifecycle = Lifecycle(
            self.admission,
            self.tasks,
            idle_timeout=0,
            max_lifetime=0,
            cancel_all=lambda: None,
            end_streams=self._end_streams,
        )
        self.booked: list[tuple[int, int | None]] = []  # (call id, kind: None if it never ran)
        self.freed = 0
        self.changed = asyncio.Event()
        self.plain = PlainCalls(depth, self, self.admission, self.lifecycle, urgent=lambda: True)
        self.plain.start()

    async def _end_streams(self) -> None:
        pass

    # -- Books ------------------------------------------------------------------------------------------
    def finish(self, hosted: Hosted, outcome: tuple[int, bytes, str]) -> None:
        hosted.session.outcome(hosted.id, *outcome)
        self.book(hosted, outcome[0])

    def book(self, hosted: Hosted, kind: int | None, ended: float | None = None) -> None:
        hosted.settled = True
        if hosted.timer is not None:
            hosted.timer.cancel()
        self.booked.append((hosted.id, kind))
        self.admission.release()
        if self.admission.in_flight == 0:
            self.lifecycle.idle()
        self.changed.set()

    def line_freed(self) -> None:
        self.freed += 1
        self.changed.set()

    # -- the service's Call handling ----------------------------------------------------------------------
    def arrive(self, hosted: Hosted) -> bool:
        if not self.plain.room(hosted):
            return False
        if self.admission.admit():
            self.lifecycle.busy()
        self.plain.accept(hosted)
        return True

    async def until(self, predicate: Callable[[], bool]) -> None:
        async with asyncio.timeout(WAIT_S):
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

    async def close(self) -> None:
        self.plain.stop()
        self.lifecycle.stop()
        await self.tasks.aclose()


class Blocker:
    """A plain function that runs until the test lets it go (or the test ends: `blocker`)."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.go = threading.Event()

    def __call__(self) -> str:
        self.began.set()
        self.go.wait(WAIT_S)
        return "done"

    async def running(self) -> None:
        assert await asyncio.to_thread(self.began.wait, WAIT_S)


@pytest.fixture
def blocker() -> Iterator[Blocker]:
    """A `Blocker` let go when the test ends, pass or fail: the plain thread then ends too."""
    made = Blocker()
    try:
        yield made
    finally:
        made.go.set()


def hosted(
    session: Session, call_id: int, fn: Callable[[], Any] = lambda: 1, *, timeout: float | None = None
) -> Hosted:
    task = CallRecord("fn", False, b"digest", b"", _wire.pack_args("fn", (), {}), timeout=timeout, plain=True)
    code = Code(b"", "fn")
    code.fn = fn
    return Hosted(session, call_id, task, code)  # type: ignore[arg-type]


class TestPlainCalls:
    async def test_accept_should_start_a_call_on_an_idle_line_only_after_the_turns_write(self):
        """Test that a call starting at once waits (pending) until the loop's turn wrote its Accept, then runs."""
        worker, session = Worker(), Session()
        call = hosted(session, 1)
        assert worker.arrive(call)
        assert session.answers == [("accept", 1, False)]
        assert (call.queued, call.counted, call.pending) == (False, True, True)
        await worker.until(lambda: worker.booked == [(1, pb.Outcome.RETURN)])
        assert not call.pending and not call.landing
        assert session.written == [("outcome", 1)]  # the thread wrote it; no Started: the Accept was out
        await worker.close()

    async def test_accept_should_land_a_started_first_when_the_accept_had_not_reached_the_wire(self):
        """Test that a call whose Accept is not in the kernel yet writes a Started before it begins."""
        worker, session = Worker(), Session(on_wire=False)
        call = hosted(session, 1)
        worker.arrive(call)
        await worker.until(lambda: worker.booked == [(1, pb.Outcome.RETURN)])
        assert call.landing
        assert session.written == [("started", 1), ("outcome", 1)]
        await worker.close()

    async def test_room_should_queue_behind_the_running_call_up_to_the_depth_then_say_no(self, blocker, monkeypatch):
        """Test the line's places: one running, ``depth`` queued (their Accept(queued) owed), then no room.

        The owed Accepts lead the thread's next message: the one that starts then goes as an Accept to
        start (no Started), the other as Accept(queued), its Started later. The loop writes none of them
        (its backstop is put out of reach: a loaded machine may not run the thread within 5 ms).
        """
        monkeypatch.setattr(_plain_calls, "QUEUED_ACCEPT_S", WAIT_S)
        worker, session = Worker(depth=2), Session()
        first, second, third = hosted(session, 1, blocker), hosted(session, 2), hosted(session, 3)
        assert worker.arrive(first)
        await blocker.running()
        assert worker.arrive(second) and worker.arrive(third)
        assert (second.queued, second.counted) == (True, False)  # counted when it starts, not now
        assert not worker.arrive(hosted(session, 4))
        assert session.answers == [("accept", 1, False)]
        blocker.go.set()
        await worker.until(lambda: len(worker.booked) == 3)
        assert session.written == [
            ("accept", 2),  # the message that says 2 starts: no Started needed
            ("accept(queued)", 3),
            ("outcome", 1),
            ("outcome", 2),
            ("started", 3),
            ("outcome", 3),
        ]
        assert session.answers == [("accept", 1, False)]  # the loop wrote no Accept of its own for them
        await worker.close()

    async def test_an_accept_owed_too_long_should_be_written_by_the_loop(self, blocker):
        """Test that a queued call behind a long one gets its Accept from the loop (`QUEUED_ACCEPT_S`), once."""
        worker, session = Worker(), Session()
        worker.arrive(hosted(session, 1, blocker))
        await blocker.running()
        worker.arrive(hosted(session, 2))
        await session.until_answered(("accept", 2, True))
        worker.arrive(hosted(session, 3))  # owed anew: the backstop is armed again
        await session.until_answered(("accept", 3, True))
        blocker.go.set()
        await worker.until(lambda: len(worker.booked) == 3)
        assert session.written == [("outcome", 1), ("started", 2), ("outcome", 2), ("started", 3), ("outcome", 3)]
        await worker.close()

    async def test_settle_should_leave_the_books_alone_until_the_line_took_a_call(self):
        """Test that a worker that ran no plain call settles nothing (the async path skips the line), then books one."""
        worker, session = Worker(), Session()
        worker.lifecycle.recycler = Recycler(1, 0)
        worker.plain.settle()
        assert not worker.plain.line.used
        assert worker.booked == [] and worker.admission.accepting
        assert worker.arrive(hosted(session, 1))
        await worker.until(lambda: worker.booked == [(1, pb.Outcome.RETURN)])
        assert worker.plain.line.used
        assert not worker.admission.accepting  # its settle counted the last call of the task limit: retiring
        await worker.close()

    async def test_room_should_refuse_a_call_that_would_start_past_the_task_limit(self):
        """Test that a call that would start at once counts against the task limit, and none starts past it."""
        worker, session = Worker(), Session()
        worker.lifecycle.recycler = Recycler(1, 0)
        assert worker.arrive(hosted(session, 1))
        await worker.until(lambda: len(worker.booked) == 1)
        assert not worker.admission.accepting  # the last call of the limit started: retiring
        assert not worker.arrive(hosted(session, 2))
        await worker.close()

    async def test_cancel_should_answer_cancelled_and_never_start_a_call_still_waiting(self, blocker):
        """Test that a queued call whose caller left is answered CANCELLED and never runs."""
        worker, session = Worker(), Session()
        ran: list[int] = []
        worker.arrive(hosted(session, 1, blocker))
        await blocker.running()
        waiting = hosted(session, 2, lambda: ran.append(2))
        worker.arrive(waiting)
        worker.plain.cancel(waiting)
        assert worker.booked == [(2, CANCELLED[0])]
        assert ("outcome", 2, CANCELLED[0], "") in session.answers
        blocker.go.set()
        await worker.until(lambda: len(worker.booked) == 2)
        assert ran == []
        assert ("started", 2) not in session.written
        await worker.close()

    async def test_cancel_should_drop_a_running_calls_result_and_count_the_line_freed_later(self, blocker):
        """Test that a running call's caller leaving answers CANCELLED now, and its late outcome is never written."""
        worker, session = Worker(), Session()
        running = hosted(session, 1, blocker)
        worker.arrive(running)
        await blocker.running()
        worker.plain.cancel(running)
        assert running.cancelled and worker.booked == [(1, CANCELLED[0])]
        blocker.go.set()
        await worker.until(lambda: worker.freed == 1)  # the thread let go of it: whom it turned away is told
        assert session.written == []
        await worker.close()

    async def test_hand_back_should_reject_a_queued_call_once_and_not_a_started_one(self, blocker):
        """Test that a call still waiting goes back to its dispatcher (a Reject naming why), once."""
        worker, session = Worker(), Session()
        running = hosted(session, 1, blocker)
        worker.arrive(running)
        await blocker.running()
        waiting = hosted(session, 2)
        worker.arrive(waiting)
        worker.plain.pay()  # its Accept left (the pool asks only for a call it knows is queued)
        assert worker.plain.hand_back(waiting, "another worker is idle")
        assert session.answers[-2:] == [  # its owed Accept first: the dispatcher sees it queued, then handed back
            ("accept", 2, True),
            ("reject", 2, UNAVAILABLE, f"{HANDED_BACK}: another worker is idle"),
        ]
        assert worker.booked == [(2, None)]  # counted out, never ran
        assert not worker.plain.hand_back(waiting, "again")
        assert not worker.plain.hand_back(running, "started")
        blocker.go.set()
        await worker.until(lambda: len(worker.booked) == 2)
        await worker.close()

    async def test_hand_back_should_keep_a_call_accepted_to_start_that_the_thread_has_not_taken_yet(self):
        """Test that a call whose Accept said it starts is never handed back, even while it still waits in line."""
        worker, session = Worker(), Session()
        starting = hosted(session, 1)
        worker.arrive(starting)
        assert starting.pending  # in line, first, waiting for the turn's write
        assert not worker.plain.hand_back(starting, "another worker is idle")
        await worker.until(lambda: worker.booked == [(1, pb.Outcome.RETURN)])
        assert [a[0] for a in session.answers] == ["accept"]
        await worker.close()

    async def test_drain_should_hand_back_every_queued_call(self, blocker):
        """Test that a worker that stops accepting gives back every call still waiting (they run elsewhere)."""
        worker, session = Worker(depth=3), Session()
        worker.arrive(hosted(session, 1, blocker))
        await blocker.running()
        for call_id in (2, 3, 4):
            worker.arrive(hosted(session, call_id))
        worker.lifecycle.drain("SIGTERM", WAIT_S)
        await worker.until(lambda: len(worker.booked) == 3)
        assert worker.booked == [(2, None), (3, None), (4, None)]
        assert [a[1] for a in session.answers if a[0] == "reject"] == [2, 3, 4]
        assert all("the worker is leaving" in a[3] for a in session.answers if a[0] == "reject")
        blocker.go.set()
        await worker.until(lambda: worker.lifecycle.done.is_set() or len(worker.booked) == 4)
        await worker.close()

    async def test_a_queued_call_past_its_deadline_should_never_start_and_raise_timeout_error(self, blocker):
        """Test that a call whose caller's time ran out while it waited is answered and never runs."""
        worker, session = Worker(), Session()
        ran: list[int] = []
        worker.arrive(hosted(session, 1, blocker))
        await blocker.running()
        late = hosted(session, 2, lambda: ran.append(2), timeout=0.05)
        worker.arrive(late)
        await worker.until(lambda: worker.booked == [(2, pb.Outcome.RAISE)])
        assert "never started" in session.answers[-1][3]
        blocker.go.set()
        await worker.until(lambda: len(worker.booked) == 2)
        assert ran == []
        await worker.close()

    async def test_a_running_call_past_its_timeout_should_answer_timeout_error_and_retire_the_worker(self, blocker):
        """Test that a plain call that cannot be interrupted makes its worker answer for it and leave on purpose.

        The timeout leaves the thread time to begin the call and the second call time to queue behind it on a
        loaded machine (with 50 ms, a CI run once found the deadline passed before the call began: it never ran).
        """
        worker, session = Worker(), Session()
        overdue = hosted(session, 1, blocker, timeout=1.0)
        worker.arrive(overdue)
        await blocker.running()
        worker.arrive(hosted(session, 2))  # queued behind it: handed back, never run here
        await worker.until(lambda: len(worker.booked) == 2)
        assert worker.booked == [(1, pb.Outcome.RAISE), (2, None)]
        (answer,) = [a for a in session.answers if a[:2] == ("outcome", 1)]
        assert "ran past its timeout of 1s" in answer[3]
        assert overdue.cancelled
        assert worker.lifecycle.recycled == "timeout"
        assert not worker.admission.accepting
        assert "ran past its timeout" in worker.lifecycle.exit_reason
        blocker.go.set()
        await asyncio.wait_for(worker.lifecycle.done.wait(), WAIT_S)
        await worker.close()
