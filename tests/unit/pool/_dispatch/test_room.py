"""Tests for pool._dispatch._room: what a pool knows of its workers' room, against real worker admission.

The model: a pool (its `RoomBook`) and a few workers (each a real
`WorkerAdmission`), joined by FIFO streams both ways, with every step a
separate event in any order hypothesis picks: the pool offers a call, a
worker decides it, a call ends, a worker's memory fills or frees, a worker
samples its signals, the pool reads a frame, a rejected dispatch resumes.
"""

from __future__ import annotations

import uuid
from collections import deque

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pool._dispatch._room import RoomBook
from pool._worker._admission import Verdict, WorkerAdmission

WORKERS = [uuid.UUID(int=1)]  # each worker's entry is independent of the others': one is the whole model
POOL = "the pool's stream"  # the session a worker remembers turning away


class Hook:
    """Rejects past ``cap`` tasks, or while ``starved`` (memory, say: a reason that is not the count)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.starved = False

    def __call__(self, ctx) -> bool:
        return self.starved or ctx.active_task_count >= self.cap


class Worker:
    def __init__(self, cap: int) -> None:
        self.hook = Hook(cap)
        self.admission = WorkerAdmission(self.hook)
        self.inbox: deque[tuple[int, int]] = deque()  # (call id, epoch) from the pool
        self.outbox: deque[tuple[str, int]] = deque()  # frames to the pool: accept/reject/outcome/room
        self.running: list[int] = []

    def tell_room(self, sessions: set) -> None:
        if POOL in sessions:
            self.outbox.append(("room", 0))

    def owes_room(self) -> bool:
        return POOL in self.admission._turned_away or ("room", 0) in self.outbox


class RoomMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.book = RoomBook()
        self.workers = {uid: Worker(cap=1 + i % 2) for i, uid in enumerate(WORKERS)}
        self.epochs: dict[int, tuple[uuid.UUID, int]] = {}  # call id -> (worker, epoch at its offer)
        self.full: set[int] = set()  # calls rejected at the worker's capacity (what the Reject frame says)
        self.rejected: list[int] = []  # Reject frames read, their dispatch not yet resumed
        self.next_id = 1

    worker = st.sampled_from(WORKERS)

    @rule(uid=worker)
    def pool_offers_a_call(self, uid):
        if uid in self.book.known_full:
            return  # what a balancer does with the hint: no round trip
        call = self.next_id
        self.next_id += 1
        self.epochs[call] = (uid, self.book.offer(uid))
        self.workers[uid].inbox.append((call, self.epochs[call][1]))

    @rule(uid=worker)
    def worker_decides(self, uid):
        w = self.workers[uid]
        if not w.inbox:
            return
        call, _ = w.inbox.popleft()
        at_capacity = w.admission.active() >= w.hook.cap
        verdict = w.admission.decide(object())
        if verdict is Verdict.ACCEPT:
            w.admission.admit()
            w.running.append(call)
            w.outbox.append(("accept", call))
        else:
            w.admission.turned_away(POOL)
            w.outbox.append(("reject", call))
            if at_capacity:
                self.full.add(call)

    @rule(uid=worker, data=st.data())
    def a_call_ends(self, uid, data):
        w = self.workers[uid]
        if not w.running:
            return
        call = w.running.pop(data.draw(st.integers(0, len(w.running) - 1)))
        w.outbox.append(("outcome", call))
        w.tell_room(w.admission.release())

    @rule(uid=worker, starved=st.booleans())
    def memory_changes(self, uid, starved):
        self.workers[uid].hook.starved = starved

    @rule(uid=worker)
    def worker_samples_its_signals(self, uid):
        w = self.workers[uid]
        w.tell_room(w.admission.idle_room())

    @rule(uid=worker)
    def pool_reads_a_frame(self, uid):
        w = self.workers[uid]
        if not w.outbox:
            return
        kind, call = w.outbox.popleft()
        if kind == "room":
            self.book.announced(uid)
            assert uid not in self.book.known_full  # room announced since its last reject: never skipped
        elif kind == "reject":
            self.rejected.append(call)

    @rule(data=st.data())
    def a_rejected_dispatch_resumes(self, data):
        if not self.rejected:
            return
        self.a_rejected_dispatch_resumes_now(self.rejected.pop(data.draw(st.integers(0, len(self.rejected) - 1))))

    @invariant()
    def a_worker_known_full_is_owed_a_room(self):
        """Nothing is stuck: each worker the pool skips will tell it when it has room."""
        for uid in self.book.known_full:
            assert self.workers[uid].owes_room(), uid

    def teardown(self):
        self.everything_settles()

    def everything_settles(self):
        """Memory frees, every call is decided and ends, every frame is read: the pool knows every worker has room."""
        for rejected in self.rejected:
            self.a_rejected_dispatch_resumes_now(rejected)
        self.rejected.clear()
        for uid, w in self.workers.items():
            w.hook.starved = False
            while w.inbox:
                self.worker_decides(uid)
            while w.running:
                w.outbox.append(("outcome", w.running.pop()))
                w.tell_room(w.admission.release())
            w.tell_room(w.admission.idle_room())
            while w.outbox:
                self.pool_reads_a_frame(uid)
                while self.rejected:
                    self.a_rejected_dispatch_resumes_now(self.rejected.pop())
        assert not self.book.known_full

    def a_rejected_dispatch_resumes_now(self, call):
        if call in self.full:  # what Placement does: only a rejection at capacity marks the worker
            self.book.rejected(*self.epochs[call])


TestRoomMachine = RoomMachine.TestCase
TestRoomMachine.settings = settings(max_examples=500, stateful_step_count=50, deadline=None)


class TestRoomBook:
    def test_a_rejection_should_mark_a_worker_full_until_it_announces_room(self):
        book, uid = RoomBook(), WORKERS[0]
        assert book.rejected(uid, book.offer(uid)) and uid in book.known_full
        book.announced(uid)
        assert uid not in book.known_full

    def test_a_rejection_answered_before_a_room_that_came_after_it_should_mark_nothing(self):
        book, uid = RoomBook(), WORKERS[0]
        epoch = book.offer(uid)
        book.announced(uid)  # the Room frame was read before the rejected dispatch resumed
        assert not book.rejected(uid, epoch) and not book.known_full

    def test_a_worker_that_leaves_should_be_forgotten(self):
        book, uid = RoomBook(), WORKERS[0]
        book.rejected(uid, book.offer(uid))
        snapshot = book.known_full
        book.forget(uid)
        assert not book.known_full and uid in snapshot  # a snapshot a balancer holds does not change under it
