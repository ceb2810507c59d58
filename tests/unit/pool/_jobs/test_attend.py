"""Tests for pool._jobs._attend: what each way out of one placement leaves in the `Holdings` and the window.

Real `Holdings`, `PlacementWindow` and `NextDue`; the placement's answer, the store and the recorder are small
fakes the test scripts. The scheduler that drives an `Attendant` is tested in test_scheduler.py and test_wakeups.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pool._call._calls import StartByPassed
from pool._call._task import CallRecord
from pool._errors import NoWorkersAvailable, PoolClosed
from pool._jobs._attempt import Attempt
from pool._jobs._attend import Attendant
from pool._jobs._codec import RetryPolicy
from pool._jobs._due import NextDue
from pool._jobs._holdings import Holdings
from pool._jobs._placements import MAX_PLACING, PlacementWindow
from pool._jobs._store import JobRecord

WAIT_S = 5.0
START_BY = 1_700_000_000.5  # what the owner lease says the latest start of an attempt placed now is


def record(job_id: str, *, queue: str = "", workflow: str = "", next_at: float = 0.0) -> JobRecord:
    return JobRecord(
        job_id, "r", "pending", 0, 1, 0.0, None, None, 60.0, next_at, "me", "", b"", None, False, queue, "", workflow
    )


class Store:
    """The retrying store, as far as an Attendant writes to it: jobs given back."""

    def __init__(self) -> None:
        self.unleased: list[tuple[str, list[str]]] = []

    async def unlease(self, owner: str, ids: list[str]) -> None:
        self.unleased.append((owner, list(ids)))


class Recorder:
    """Follows an accepted attempt until the test ends it (`end`), and records jobs failed before they ran."""

    owner = "me"

    def __init__(self) -> None:
        self.following = asyncio.Event()
        self.outcome: asyncio.Future[JobRecord | None] = asyncio.get_running_loop().create_future()
        self.calls: list[object] = []
        self.failed: list[tuple[str, BaseException]] = []

    async def follow(self, attempt: Attempt, call: object) -> JobRecord | None:
        self.calls.append(call)
        self.following.set()
        return await self.outcome

    def end(self, final: JobRecord | None) -> None:
        self.outcome.set_result(final)

    async def fail_pending(self, job: JobRecord, error: BaseException) -> None:
        self.failed.append((job.id, error))


class Scene:
    """One Attendant over one scheduler's state; ``answer`` is what the placement returns or raises."""

    def __init__(self, answer: object = None, *, workers: bool = True, may_start: bool = True) -> None:
        self.answer = answer
        self.workers = workers
        self.told: list[tuple[str, JobRecord | None]] = []
        self.held = Holdings(lambda job_id, final: self.told.append((job_id, final)))
        self.held.backlog = False
        self.store = Store()
        self.recorder = Recorder()
        self.window = PlacementWindow()
        self.next_due = NextDue()
        self.next_due.known = True
        self.room = asyncio.Event()
        self.starved = 0
        self.wakes = 0
        self.placing = asyncio.Event()
        self.placed: list[tuple[str, float]] = []  # (name, start_by) of each task placed
        self.attendant = Attendant(
            self.held,
            self.store,  # type: ignore[arg-type]
            self.recorder,  # type: ignore[arg-type]
            self.window,
            self.next_due,
            place=self._place,
            starved=self._starve,
            has_workers=lambda: self.workers,
            room=self.room,
            wake=self._wake,
            may_start=lambda attempt: may_start,
            start_by=lambda: START_BY,
        )

    async def _place(self, task: CallRecord) -> object:
        self.placed.append((task.name, task.start_by))
        self.placing.set()
        answer = self.answer() if callable(self.answer) else self.answer
        if isinstance(answer, asyncio.Future):
            answer = await answer
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def _starve(self) -> None:
        self.starved += 1

    def _wake(self) -> None:
        self.wakes += 1

    def leased(self, job: JobRecord) -> Attempt:
        """Hold ``job`` as the scheduler does, and take it out to place it."""
        attempt = Attempt(job, CallRecord(job.routine, False, b"", b"", b""), RetryPolicy())
        self.held.adopt(attempt)
        self.held.waiting.remove(attempt)
        self.held.placing.add(attempt)
        return attempt

    async def attend(self, attempt: Attempt) -> None:
        await asyncio.wait_for(self.attendant.attend(attempt), WAIT_S)


def raising(exc: BaseException, before: Callable[[], object] = lambda: None) -> Callable[[], BaseException]:
    def answer() -> BaseException:
        before()
        return exc

    return answer


class TestAccepted:
    async def test_attend_should_hold_the_job_as_running_until_its_outcome_then_tell_its_waiters(self):
        """Test that an accepted job is running (not placing, no longer marked cancelled) while it is followed,
        and ends with its final record, the store's due time still known."""
        call = object()
        scene = Scene(call)
        attempt = scene.leased(record("j"))
        scene.held.cancelled.add("j")  # a cancel that raced the Accept: the recorder sees it through now
        attending = asyncio.ensure_future(scene.attend(attempt))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        assert scene.held.running == {"j": attempt} and scene.held.placing == set() and scene.held.cancelled == set()
        assert scene.recorder.calls == [call]
        final = record("j")
        scene.recorder.end(final)
        await attending
        assert (scene.held.running, scene.held.ids, scene.told) == ({}, set(), [("j", final)])
        assert (scene.held.backlog, scene.next_due.known, scene.wakes) == (False, True, 0)

    async def test_attend_should_grow_the_window_and_make_room_when_a_worker_accepts(self):
        """Test the slow start: an Accept doubles a shrunk window and lets the scheduler place more."""
        scene = Scene(object())
        scene.window.shrink()
        attending = asyncio.ensure_future(scene.attend(scene.leased(record("j"))))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        assert scene.window.size == 2 and scene.room.is_set()
        scene.recorder.end(None)
        await attending

    async def test_attend_should_not_make_room_when_the_window_is_already_full_size(self):
        """Test that an Accept with the window at its largest signals nothing (no placement slot was freed)."""
        scene = Scene(object())
        attending = asyncio.ensure_future(scene.attend(scene.leased(record("j"))))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        assert scene.window.size == MAX_PLACING and not scene.room.is_set()
        scene.recorder.end(None)
        await attending

    async def test_attend_should_note_a_backlog_and_forget_the_due_time_when_the_job_went_back_to_the_store(self):
        """Test that an attempt with no final record (a retry due later) makes the scheduler read the store again."""
        scene = Scene(object())
        attending = asyncio.ensure_future(scene.attend(scene.leased(record("j"))))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        scene.recorder.end(None)
        await attending
        assert (scene.held.backlog, scene.next_due.known, scene.told) == (True, False, [("j", None)])

    @pytest.mark.parametrize("limit", [{"queue": "q"}, {"workflow": "w"}])
    async def test_attend_should_wake_the_scheduler_when_a_job_with_a_shared_limit_ends(self, limit):
        """Test that a job holding a queue or workflow slot wakes the scheduler as it ends (the slot is free)."""
        scene = Scene(object())
        attending = asyncio.ensure_future(scene.attend(scene.leased(record("j", **limit))))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        assert scene.wakes == 0
        scene.recorder.end(record("j", **limit))
        await attending
        assert scene.wakes == 1

    async def test_attend_should_end_the_job_here_when_following_it_is_cancelled(self):
        """Test that a follow cut short (the scheduler closing) still lets go of the job, backlog noted."""
        scene = Scene(object())
        attending = asyncio.ensure_future(scene.attend(scene.leased(record("j"))))
        await asyncio.wait_for(scene.recorder.following.wait(), WAIT_S)
        attending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attending
        assert (scene.held.running, scene.held.ids, scene.told, scene.held.backlog) == ({}, set(), [("j", None)], True)


class TestNotPlaced:
    async def test_attend_should_put_the_job_back_blocked_in_this_epoch_when_its_limit_is_full(self):
        """Test that a full limit (no call) parks the job until a slot frees, and frees its placement slot."""
        scene = Scene(None)
        scene.window.epoch = 3
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert (attempt.blocked_at, scene.held.waiting, scene.held.placing) == (3, [attempt], set())
        assert scene.room.is_set() and scene.starved == 0 and scene.held.ids == {"j"}

    async def test_attend_should_offer_nothing_and_put_the_job_back_when_the_owner_lease_forbids_a_start(self):
        """Test a placement whose turn came after the lease stopped letting jobs start: no offer, back in line."""
        scene = Scene(None, may_start=False)
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert not scene.placing.is_set()  # never offered to a worker
        assert (scene.held.waiting, scene.held.placing, scene.held.ids) == ([attempt], set(), {"j"})
        assert scene.room.is_set() and scene.store.unleased == []  # the loop decides: give back, or wait

    async def test_attend_should_give_a_job_back_to_the_store_unstarted_when_it_reached_its_worker_late(self):
        """Test the worker-side fence (issue 54): the attempt carries the lease's start-by time; a worker that got it
        too late declined it, and the job goes back to the store (not retried here, not failed, not counted)."""
        scene = Scene(StartByPassed("worker w declined r(): past its start-by time: 0.200s late"))
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert scene.placed == [("r", START_BY)]
        assert scene.store.unleased == [("me", ["j"])] and scene.recorder.failed == []
        assert (scene.held.ids, scene.held.waiting, scene.held.placing, scene.told) == (set(), [], set(), [("j", None)])
        assert scene.held.backlog and scene.room.is_set() and scene.starved == 0

    async def test_attend_should_wait_for_a_capacity_event_when_no_worker_had_room(self):
        """Test that a job without a shared limit stays held, one placement at a time, until capacity frees."""
        scene = Scene(NoWorkersAvailable("busy"))
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert (scene.held.waiting, scene.held.placing, scene.held.ids) == ([attempt], set(), {"j"})
        assert (scene.window.size, scene.window.no_worker, scene.room.is_set()) == (1, True, False)
        assert (scene.starved, scene.store.unleased) == (1, [])

    async def test_attend_should_try_again_at_once_when_capacity_freed_while_it_was_refused(self):
        """Test the lost wake-up: a capacity event during the refused placement makes room at once."""
        scene = Scene()
        scene.answer = raising(NoWorkersAvailable("busy"), before=scene.window.capacity_changed)
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert (scene.window.no_worker, scene.room.is_set(), scene.held.waiting) == (False, True, [attempt])

    @pytest.mark.parametrize("limit", [{"queue": "q"}, {"workflow": "w"}])
    async def test_attend_should_give_a_job_with_a_shared_limit_back_when_no_worker_had_room(self, limit):
        """Test that a job never sits on a shared limit slot here: it goes back to the store for a process with room."""
        scene = Scene(NoWorkersAvailable("busy"))
        other = scene.leased(record("k"))
        scene.held.placing.discard(other)
        scene.held.waiting.append(other)
        await scene.attend(scene.leased(record("j", **limit)))
        assert scene.store.unleased == [("me", ["j"])]
        assert (scene.held.ids, scene.held.waiting, scene.told) == ({"k"}, [other], [("j", None)])
        assert (scene.held.gave_back, scene.held.backlog, scene.window.size, scene.starved) == (True, True, 1, 1)

    async def test_attend_should_give_back_every_waiting_job_when_the_pool_has_no_worker(self):
        """Test that a process with no worker at all holds on to nothing: the job and all waiting go back."""
        scene = Scene(NoWorkersAvailable("no worker"), workers=False)
        waiting = [scene.leased(record(job_id, next_at=i)) for i, job_id in enumerate(["k", "l"])]
        for attempt in waiting:
            scene.held.placing.discard(attempt)
            scene.held.adopt(attempt)
        await scene.attend(scene.leased(record("j")))
        assert scene.store.unleased == [("me", ["j", "k", "l"])]
        assert (scene.held.ids, scene.held.waiting, scene.held.gave_back, scene.starved) == (set(), [], True, 1)

    async def test_attend_should_put_the_job_back_when_the_pool_closed(self):
        """Test that a pool closing under a placement leaves the job held and waiting (the scheduler gives it back)."""
        scene = Scene(PoolClosed("closing"))
        attempt = scene.leased(record("j"))
        await scene.attend(attempt)
        assert (scene.held.waiting, scene.held.ids, scene.store.unleased, scene.recorder.failed) == (
            [attempt],
            {"j"},
            [],
            [],
        )

    async def test_attend_should_fail_the_job_in_the_store_when_it_cannot_start(self):
        """Test that any other placement error fails the job with that reason, and this process lets it go."""
        error = RuntimeError("routine blob too large")
        scene = Scene(error)
        await scene.attend(scene.leased(record("j")))
        assert scene.recorder.failed == [("j", error)]
        assert (scene.held.ids, scene.held.placing, scene.told) == (set(), set(), [("j", None)])

    async def test_attend_should_drop_a_job_whose_cancel_cut_its_placement_short(self):
        """Test that a placement cancelled because its job was cancelled ends quietly, the job no longer held."""
        scene = Scene(asyncio.get_running_loop().create_future())
        attempt = scene.leased(record("j"))
        attending = asyncio.ensure_future(scene.attendant.attend(attempt))
        await asyncio.wait_for(scene.placing.wait(), WAIT_S)
        attempt.cancel_requested = True
        attending.cancel()
        await asyncio.wait_for(attending, WAIT_S)
        assert (scene.held.ids, scene.held.placing, scene.told) == (set(), set(), [("j", None)])

    async def test_attend_should_propagate_a_cancellation_that_is_not_the_jobs_cancel(self):
        """Test that the scheduler closing cancels the placement through, the job still held (given back later)."""
        scene = Scene(asyncio.get_running_loop().create_future())
        attempt = scene.leased(record("j"))
        attending = asyncio.ensure_future(scene.attendant.attend(attempt))
        await asyncio.wait_for(scene.placing.wait(), WAIT_S)
        attending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(attending, WAIT_S)
        assert (scene.held.ids, scene.held.placing, scene.told) == ({"j"}, set(), [])
