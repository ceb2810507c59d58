"""Tests for pool._dispatch._roster.PlainRoster and the worker's plain slot (pool._worker._admission)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from backpressure import TaskCountBackpressure
from pool._dispatch._roster import PlainRoster, Roster
from pool._worker._admission import Verdict, WorkerAdmission

UIDS = [uuid.UUID(int=i) for i in range(1, 5)]

PLAIN = SimpleNamespace(plain=True)
ASYNC = SimpleNamespace(plain=False)


class TestPlainRoster:
    @given(st.lists(st.tuples(st.booleans(), st.sampled_from(UIDS)), max_size=40), st.sets(st.sampled_from(UIDS)))
    def test_known_full_should_be_the_rosters_and_the_workers_with_a_plain_call_running(self, steps, full):
        """Test that a worker is skipped for plain calls exactly while this pool has a plain call on it."""
        roster = Roster()
        for uid in full:
            roster.room.rejected(uid, roster.room.offer(uid))
        view = PlainRoster(roster)
        running: dict[uuid.UUID, int] = {}
        for take, uid in steps:
            if take:
                view.taken(uid)
                running[uid] = running.get(uid, 0) + 1
            elif running.get(uid):
                view.freed(uid)
                running[uid] -= 1
            assert set(view.known_full) == set(full) | {u for u, n in running.items() if n}

    def test_known_full_should_follow_the_roster_when_it_changes(self):
        roster = Roster()
        view = PlainRoster(roster)
        view.taken(UIDS[0])
        assert set(view.known_full) == {UIDS[0]}
        roster.room.rejected(UIDS[1], roster.room.offer(UIDS[1]))
        assert set(view.known_full) == {UIDS[0], UIDS[1]}
        view.freed(UIDS[0])
        assert set(view.known_full) == {UIDS[1]}


class TestWorkerAdmissionPlainSlot:
    def test_decide_should_turn_a_plain_call_away_while_another_runs_whatever_the_cap(self):
        admission = WorkerAdmission(TaskCountBackpressure(8))
        admission.plain_started("first")
        assert admission.decide(PLAIN) is Verdict.BUSY
        assert admission.decide(ASYNC) is Verdict.ACCEPT  # async work still goes in

    def test_plain_done_should_free_the_slot_and_name_whom_to_tell(self):
        admission = WorkerAdmission(None)
        admission.plain_started("first")
        assert admission.decide(PLAIN) is Verdict.BUSY
        admission.turned_away("session")
        assert admission.plain_done("other") == set()  # not the call on the thread: nothing changes
        assert admission.decide(PLAIN) is Verdict.BUSY
        assert admission.plain_done("first") == {"session"}
        assert admission.decide(PLAIN) is Verdict.ACCEPT

    def test_repr_should_show_a_busy_plain_slot(self):
        admission = WorkerAdmission(None)
        admission.plain_started("first")
        assert "plain busy" in repr(admission)
