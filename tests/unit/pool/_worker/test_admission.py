"""Tests for pool._worker._admission: a worker's verdicts and its counts, with no loop and no socket.

The plain line as admission sees it is in tests/unit/pool/_dispatch/test_roster.py; the hook's signals in
test_signals.py; the Room protocol as a whole, driven from both ends, in tests/unit/pool/_dispatch/test_room.py.
"""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from backpressure import BackpressureContext, TaskCountBackpressure
from pool._transport._rpc import RESOURCE_EXHAUSTED, UNAVAILABLE
from pool._worker._admission import Verdict, WorkerAdmission


class Recorder:
    """A hook that records what it is shown and answers ``reject``."""

    def __init__(self, reject: bool = False) -> None:
        self.reject = reject
        self.seen: list[BackpressureContext] = []

    def __call__(self, context: BackpressureContext) -> bool:
        self.seen.append(context)
        return self.reject


class TestVerdict:
    def test_codes_should_be_the_grpc_codes_a_dispatcher_reads(self):
        """Test that BUSY is transient (RESOURCE_EXHAUSTED) and a draining or failing worker says UNAVAILABLE."""
        assert (Verdict.ACCEPT.code, Verdict.ACCEPT.message) == (0, "")
        assert Verdict.BUSY.code == RESOURCE_EXHAUSTED
        assert Verdict.DRAINING.code == Verdict.HOOK_FAILED.code == UNAVAILABLE
        assert "draining" in Verdict.DRAINING.message and "hook" in Verdict.HOOK_FAILED.message


class TestWorkerAdmission:
    def test_decide_should_accept_everything_when_there_is_no_hook(self):
        """Test that a worker with no hook accepts however many calls run."""
        admission = WorkerAdmission(None)
        for _ in range(50):
            assert admission.decide(object()) is Verdict.ACCEPT
            admission.admit()
        assert admission.in_flight == 50

    def test_decide_should_say_draining_when_not_accepting_whatever_the_hook(self):
        """Test that a draining worker turns calls away without asking its hook."""
        hook = Recorder()
        admission = WorkerAdmission(hook)
        admission.accepting = False
        assert admission.decide(object()) is Verdict.DRAINING
        assert hook.seen == []

    def test_decide_should_say_busy_when_the_hook_returns_true(self):
        """Test that a truthy answer rejects, and the hook sees the task and the count of active calls."""
        hook = Recorder(reject=True)
        admission = WorkerAdmission(hook)
        admission.admit()
        task = object()
        assert admission.decide(task) is Verdict.BUSY
        assert hook.seen == [BackpressureContext(1, task)]

    def test_decide_should_report_hook_failed_and_keep_the_error_when_the_hook_raises(self):
        """Test that a raising hook is answered (not propagated) and its error kept for the log."""
        error = ValueError("boom")

        def hook(context: BackpressureContext) -> bool:
            raise error

        admission = WorkerAdmission(hook)
        assert admission.decide(object()) is Verdict.HOOK_FAILED
        assert admission.hook_error is error

    async def test_decide_should_count_a_call_being_vetted_when_the_hook_is_async(self):
        """Test that a call an async hook still decides on counts as active for the next decision.

        Without it, a burst would slip past an async TaskCountBackpressure(1) while its first call is vetted.
        """
        seen: list[int] = []

        async def hook(context: BackpressureContext) -> bool:
            seen.append(context.active_task_count)
            return context.active_task_count >= 1

        admission = WorkerAdmission(hook)
        first = admission.decide("a")
        second = admission.decide("b")
        assert admission.vetting == 2
        answers = await asyncio.wait_for(asyncio.gather(first, second), 5)  # type: ignore[arg-type]
        assert seen == [0, 1]
        assert admission.settle(answers[0]) is Verdict.ACCEPT
        assert admission.settle(answers[1]) is Verdict.BUSY
        assert admission.vetting == 0

    def test_settle_should_prefer_the_error_then_draining_over_the_hooks_answer(self):
        """Test the verdict once an async hook answered: its error first, then a drain that began meanwhile."""
        admission = WorkerAdmission(Recorder())
        admission.vetting = 3
        error = RuntimeError("late")
        assert admission.settle(False, error) is Verdict.HOOK_FAILED and admission.hook_error is error
        admission.accepting = False
        assert admission.settle(False) is Verdict.DRAINING
        assert admission.settle(True) is Verdict.DRAINING
        assert admission.vetting == 0

    def test_admit_should_say_whether_the_worker_was_idle_until_now(self):
        """Test that only the first call on an idle worker reports the worker busy."""
        admission = WorkerAdmission(None)
        assert admission.admit() is True
        assert admission.admit() is False
        admission.release()
        admission.release()
        assert admission.admit() is True

    def test_release_should_hand_each_turned_away_session_once(self):
        """Test that sessions told BUSY get a Room at the next release, and only once."""
        admission = WorkerAdmission(TaskCountBackpressure(1))
        admission.admit()
        assert admission.decide("t") is Verdict.BUSY
        admission.turned_away("s1")
        admission.turned_away("s2")
        admission.turned_away("s1")
        assert admission.owed_room
        assert admission.release() == {"s1", "s2"}
        assert not admission.owed_room
        admission.admit()
        assert admission.release() == set()

    def test_park_should_free_the_slot_and_owe_room_when_slots_are_not_held(self):
        """Test that a task waiting on a nested call stops counting, so its worker can take the nested call."""
        admission = WorkerAdmission(TaskCountBackpressure(1))
        admission.admit()
        admission.turned_away("s")
        assert admission.park() == {"s"}
        assert admission.active() == 0
        assert admission.decide("nested") is Verdict.ACCEPT
        admission.unpark()
        assert admission.active() == 1
        assert admission.decide("other") is Verdict.BUSY

    def test_park_should_keep_the_slot_when_hold_slots_is_set(self):
        """Test that with hold_slots a parked task still counts and nobody is told room."""
        admission = WorkerAdmission(TaskCountBackpressure(1), hold_slots=True)
        admission.admit()
        admission.turned_away("s")
        assert admission.park() == set()
        assert admission.active() == 1
        assert admission.decide("nested") is Verdict.BUSY
        assert admission.owed_room

    def test_idle_room_should_tell_only_when_nothing_active_or_vetting(self):
        """Test that a resource sample tells "room" only when no ending call would tell it later."""
        admission = WorkerAdmission(Recorder())
        assert admission.idle_room() == set()  # nobody owed
        admission.turned_away("s")
        admission.admit()
        assert admission.idle_room() == set()  # a running call will tell it when it ends
        admission.in_flight = 0
        admission.vetting = 1
        assert admission.idle_room() == set()  # a call being vetted will
        admission.vetting = 0
        assert admission.idle_room() == {"s"}
        assert admission.idle_room() == set()

    def test_room_now_should_hand_over_the_sessions_without_counting_anything_out(self):
        """Test that a plain call leaving its thread tells the sessions turned away, with the counts unchanged."""
        admission = WorkerAdmission(None)
        admission.admit()
        admission.turned_away("s")
        assert admission.room_now() == {"s"}
        assert admission.in_flight == 1

    def test_repr_should_show_the_state_and_the_counts(self):
        """Test the repr a log line shows."""
        admission = WorkerAdmission(None)
        admission.admit()
        admission.park()
        assert repr(admission) == "<WorkerAdmission accepting [1 in flight, 1 parked, 0 vetting]>"
        admission.accepting = False
        assert repr(admission).startswith("<WorkerAdmission draining")

    @given(
        steps=st.lists(st.sampled_from(["admit", "release", "park", "unpark"]), max_size=60),
        hold=st.booleans(),
    )
    def test_active_should_be_in_flight_less_parked_and_never_negative(self, steps, hold):
        """Test the count the hook sees: calls in flight, less those parked (unless slots are held), at least 0."""
        admission = WorkerAdmission(None, hold_slots=hold)
        for step in steps:
            if step == "admit":
                admission.admit()
            elif step == "release" and admission.in_flight > admission.parked:
                admission.release()
            elif step == "park" and admission.parked < admission.in_flight:
                admission.park()
            elif step == "unpark" and admission.parked:
                admission.unpark()
            expected = admission.in_flight if hold else admission.in_flight - admission.parked
            assert admission.active() == max(0, expected)
