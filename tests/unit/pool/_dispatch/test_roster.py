"""Tests for pool._dispatch._roster.PlainSlots and the worker's plain line as admission sees it (pool._worker)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from backpressure import TaskCountBackpressure
from pool._dispatch._roster import PlainSlots, Roster
from pool._transport._outgoing import QUEUED, STARTED
from pool._worker._admission import Verdict, WorkerAdmission
from pool._worker._plain import Place, PlainLine

UIDS = [uuid.UUID(int=i) for i in range(1, 5)]

PLAIN = SimpleNamespace(plain=True, prefetch=None)
NO_PREFETCH = SimpleNamespace(plain=True, prefetch=0)
ASYNC = SimpleNamespace(plain=False)


def _call(state: int = STARTED) -> SimpleNamespace:
    return SimpleNamespace(state=state, recalled=False)


class TestPlainSlots:
    @given(
        st.lists(st.tuples(st.booleans(), st.sampled_from(UIDS)), max_size=40),
        st.sets(st.sampled_from(UIDS)),
        st.integers(1, 3),
    )
    def test_known_full_should_be_the_rosters_and_the_workers_holding_the_passs_room(self, steps, full, room):
        """Test that a pass skips a worker exactly while this pool has ``room`` or more plain calls on it."""
        roster = Roster()
        for uid in full:
            roster.room.rejected(uid, roster.room.offer(uid))
        slots = PlainSlots(roster, depth=2)
        view = slots.view(room)
        held: dict[uuid.UUID, list[object]] = {}
        for take, uid in steps:
            if take:
                call = _call()
                slots.taken(uid, call)  # type: ignore[arg-type]
                held.setdefault(uid, []).append(call)
            elif held.get(uid):
                slots.freed(uid, held[uid].pop())  # type: ignore[arg-type]
            assert set(view.known_full) == set(full) | {u for u, calls in held.items() if len(calls) >= room}

    @given(st.integers(1, 4), st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=30))
    def test_none_idle_should_say_exactly_when_the_idle_pass_could_offer_no_member(self, members, steps):
        """Test the shortcut `Placement.send_plain` takes past the idle pass: true iff every member runs one of ours."""
        roster = Roster()
        for uid in UIDS[:members]:
            roster.add(SimpleNamespace(metadata=SimpleNamespace(uid=uid)))  # type: ignore[arg-type]
        slots = PlainSlots(roster, depth=2)
        held: dict[uuid.UUID, list[object]] = {}
        for take, index in steps:
            uid = UIDS[index]  # (beyond the members: a worker that left, its calls not ended yet)
            if take:
                held.setdefault(uid, []).append(call := _call())
                slots.taken(uid, call)  # type: ignore[arg-type]
            elif held.get(uid):
                slots.freed(uid, held[uid].pop())  # type: ignore[arg-type]
            assert slots.none_idle() == set(roster.workers).issubset(slots.view(1).known_full)
        for uid in UIDS:  # members come and go (the answer is cached until they do)
            if uid in roster:
                roster.remove(uid)
            else:
                roster.add(SimpleNamespace(metadata=SimpleNamespace(uid=uid)))  # type: ignore[arg-type]
            assert slots.none_idle() == set(roster.workers).issubset(slots.view(1).known_full)

    def test_rooms_should_be_idle_workers_then_places_in_line_unless_the_call_opts_out(self):
        """Test the two passes: 1 (idle workers), then 1 + depth; a routine's prefetch bounds the second."""
        slots = PlainSlots(Roster(), depth=2)
        assert slots.rooms(PLAIN) == (1, 3)  # type: ignore[arg-type]
        assert slots.rooms(NO_PREFETCH) == (1,)  # type: ignore[arg-type]
        assert slots.rooms(SimpleNamespace(prefetch=1)) == (1, 2)  # type: ignore[arg-type]
        assert PlainSlots(Roster(), depth=0).rooms(PLAIN) == (1,)  # type: ignore[arg-type]

    def test_queued_elsewhere_should_name_a_call_still_waiting_on_another_worker(self):
        """Test the call an idle worker asks back: queued (not started), elsewhere, not asked already."""
        slots = PlainSlots(Roster(), depth=2)
        running, waiting = _call(), _call(QUEUED)
        slots.taken(UIDS[0], running)  # type: ignore[arg-type]
        slots.taken(UIDS[0], waiting)  # type: ignore[arg-type]
        assert slots.queued_elsewhere(UIDS[0]) is None  # not from the worker itself
        assert slots.queued_elsewhere(UIDS[1]) is waiting
        waiting.recalled = True
        assert slots.queued_elsewhere(UIDS[1]) is None


def _line(depth: int = 1) -> PlainLine:
    return PlainLine(depth, urgent=lambda: False, wake=lambda: None)


class TestWorkerAdmissionPlainLine:
    def test_decide_should_queue_behind_a_running_plain_call_then_turn_away_whatever_the_cap(self):
        """Test that a busy worker accepts plain calls into its line up to its depth, then says BUSY."""
        admission = WorkerAdmission(TaskCountBackpressure(8))
        admission.line = line = _line(depth=1)
        line.running = "first"  # type: ignore[assignment]
        assert admission.decide(PLAIN) is Verdict.ACCEPT  # a place in line
        assert admission.decide(NO_PREFETCH) is Verdict.BUSY  # prefetch=0: never waits inside a worker
        line.waiting.append("second")  # type: ignore[arg-type]
        assert admission.decide(PLAIN) is Verdict.BUSY
        assert admission.decide(ASYNC) is Verdict.ACCEPT  # async work still goes in

    def test_a_call_queued_behind_the_running_plain_call_should_be_judged_as_if_that_one_had_ended(self):
        """Test that TaskCountBackpressure(1) lets a plain call wait behind the running one (not run beside it)."""
        admission = WorkerAdmission(TaskCountBackpressure(1))
        admission.line = line = _line(depth=1)
        admission.admit()
        line.running = "first"  # type: ignore[assignment]
        assert admission.decide(PLAIN) is Verdict.ACCEPT
        assert admission.decide(ASYNC) is Verdict.BUSY  # it would run beside the plain call

    def test_waiting_plain_calls_should_not_count_against_backpressure(self):
        admission = WorkerAdmission(TaskCountBackpressure(2))
        admission.line = line = _line(depth=2)
        for _ in range(3):
            admission.admit()
        line.running = "first"  # type: ignore[assignment]
        line.waiting.extend(["second", "third"])  # type: ignore[list-item]
        assert admission.active() == 1
        assert "2 plain waiting" in repr(admission)

    def test_a_call_accepted_to_start_but_not_taken_yet_should_leave_the_line_its_places(self):
        """Test that a call waiting for the thread to take it (accepted to start at once) fills one place, not two.

        Two calls arriving in one read: the first starts, the second waits behind it (prefetch 1), not BUSY.
        """
        line = _line(depth=1)
        line.waiting.append("starting")  # type: ignore[arg-type]
        assert line.room(PLAIN) is Place.QUEUE
        line.waiting.append("queued")  # type: ignore[arg-type]
        assert line.room(PLAIN) is None
