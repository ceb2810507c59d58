"""Tests for pool._worker._plain: what the plain thread writes before a call begins (in process, a recording session).

The line's behaviour with real workers (queued calls, handbacks, exactly once) is in
tests/integration/plain/test_plain.py and test_plain_line.py; its room, in tests/unit/pool/_dispatch/test_roster.py.
"""

from __future__ import annotations

import threading
import types

from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._worker._plain import PlainLine

WAIT_S = 10.0


class Session:
    """Records what the thread writes, and when, beside what the calls do."""

    def __init__(self, events: list[object]) -> None:
        self.events = events

    def write_from_thread(self, frames: pb.Frames, *, land: bool = False) -> bool:
        for frame in frames.frames:
            self.events.append((frame.WhichOneof("body"), frame.id, land))
        return True


def _hosted(
    session: Session,
    call_id: int,
    events: list[object],
    *,
    queued: bool = False,
    landing: bool = False,
    pending: bool = False,
):
    def fn() -> None:
        events.append(("ran", call_id))

    return types.SimpleNamespace(
        session=session,
        id=call_id,
        queued=queued,
        landing=landing,
        pending=pending,
        counted=True,
        deadline=None,
        cancelled=False,
        task=types.SimpleNamespace(name="fn", args=_wire.pack_args("fn", (), {}), traceparent="", queue=""),
        code=types.SimpleNamespace(resolve=lambda: fn),
    )


def _run(*calls: dict[str, bool]) -> list[object]:
    """Run plain calls through a line; the session's and the calls' events, in order."""
    events: list[object] = []
    session = Session(events)
    ended = threading.Event()
    line = PlainLine(2, urgent=lambda: True, wake=ended.set)
    try:
        for call_id, flags in enumerate(calls, start=1):
            ended.clear()
            line.add(_hosted(session, call_id, events, **flags))
            assert ended.wait(WAIT_S)  # the call ended (the thread wrote its outcome first)
    finally:
        line.stop()
    return events


def test_a_call_whose_accept_reached_the_wire_should_begin_without_a_started():
    """Test the common case: the loop wrote the Accept of a call that starts at once; no extra write."""
    assert _run({}) == [("ran", 1), ("outcome", 1, False)]


def test_a_call_whose_accept_had_not_left_should_land_a_started_before_it_begins():
    """Test that a worker dying in the call still told its pool, on the wire, that it began (never run twice).

    Without it, the pool reading the dead worker's socket to its end finds no sign the call began and
    places it again.
    """
    assert _run({"landing": True}) == [("started", 1, True), ("ran", 1), ("outcome", 1, False)]


def test_a_queued_call_should_land_a_started_before_it_begins():
    assert _run({"queued": True}) == [("started", 1, True), ("ran", 1), ("outcome", 1, False)]


def test_a_call_whose_accept_is_being_written_should_begin_first_and_only_once_released():
    """Test the line's order while a call accepted to start waits for the loop's write: nothing overtakes it.

    It is first in line (its Accept said it starts); a call queued behind it must not begin before it,
    or the worker could die running the second while its pool takes the first for started.
    """
    events: list[object] = []
    session = Session(events)
    ended = threading.Semaphore(0)
    line = PlainLine(2, urgent=lambda: True, wake=ended.release)
    try:
        first = _hosted(session, 1, events, pending=True)
        line.add(first)
        line.add(_hosted(session, 2, events, queued=True))
        assert not ended.acquire(timeout=0.3)  # (bounded: when right, nothing ends however long one waits)
        assert events == []  # neither began: the first waits for its write, the second behind it
        line.release(first, landing=True)  # as the loop does once the turn's write is done
        for _ in range(2):
            assert ended.acquire(timeout=WAIT_S)  # each call ended
    finally:
        line.stop()
    assert events[:2] == [("started", 1, True), ("ran", 1)]
    assert [event for event in events if event[0] == "ran"] == [("ran", 1), ("ran", 2)]


def test_settle_should_report_each_ended_call_once_and_nothing_before_the_line_is_used():
    """Test that a line that never took a call reports nothing, and each call that ended is reported exactly once.

    `settle` looks without the lock when nothing ended (the async path's cost); a call the thread
    ends meanwhile is the next look's, never lost.
    """
    events: list[object] = []
    session = Session(events)
    ended = threading.Semaphore(0)
    line = PlainLine(2, urgent=lambda: True, wake=ended.release)
    try:
        assert not line.used
        assert line.settle() == []
        calls = [_hosted(session, call_id, events) for call_id in (1, 2, 3)]
        for hosted in calls:
            line.add(hosted)
        assert line.used
        seen: list[object] = []
        for _ in range(3):
            assert ended.acquire(timeout=WAIT_S)
            seen += [hosted for hosted, _outcome, _when in line.settle()]
    finally:
        line.stop()
    assert seen == calls
    assert line.settle() == []
