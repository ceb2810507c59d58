"""A hypothesis state machine over the job store: submit / lease / accept / complete / crash / recover / purge / requeue.

Invariants, checked after every step against a plain model: no job is
ever lost, a committed outcome never changes (until its id is submitted
anew), attempts count the accepted attempts, a job has at most one owner,
and a live owner's jobs are never taken from it; leases follow priority,
then due time, then submission; a purge deletes only final jobs past the
cut; a requeued job keeps its attempts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from pool._jobs._store import TERMINAL_STATES, NewJob
from pool._jobs._stores._sqlite import SQLiteStore

IDS = st.sampled_from(["a", "b", "c", "d"])
OWNERS = st.sampled_from(["p1", "p2"])
TTL = 10.0


@dataclasses.dataclass
class Model:
    state: str = "pending"
    owner: str = ""
    attempts: int = 0
    next_at: float = 0.0
    created: float = 0.0
    priority: int = 0
    finished: float = 0.0


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.TemporaryDirectory(prefix="leakypool-machine-")
        self.store = SQLiteStore(f"{self.directory.name}/jobs.db")
        self.run(self.store.open())
        self.now = 1_000.0
        self.jobs: dict[str, Model] = {}
        self.leases: dict[str, float] = {}  # owner -> expires_at, as the store keeps it

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()
        self.directory.cleanup()

    @rule(job_id=IDS, priority=st.sampled_from([0, 0, 1, 5]), delay=st.sampled_from([0.0, 0.0, 2.0]))
    def submit(self, job_id: str, priority: int, delay: float) -> None:
        new = NewJob(job_id, "fn", b"p", self.now, self.now + 100, next_at=self.now + delay, priority=priority)
        record, created = self.run(self.store.submit(new))
        current = self.jobs.get(job_id)
        assert created == (current is None or current.state in TERMINAL_STATES)
        if created:
            self.jobs[job_id] = Model(next_at=self.now + delay, created=self.now, priority=priority)
        assert record.state == self.jobs[job_id].state

    @rule(owner=OWNERS)
    def heartbeat(self, owner: str) -> None:
        self.run(self.store.heartbeat(owner, self.now, TTL))
        self.leases[owner] = self.now + TTL

    @rule(owner=OWNERS, limit=st.integers(1, 4))
    def lease(self, owner: str, limit: int) -> None:
        leased = self.run(self.store.lease(owner, limit, self.now))
        candidates = sorted(
            (i for i, j in self.jobs.items() if j.state == "pending" and not j.owner and j.next_at <= self.now),
            key=lambda i: (-self.jobs[i].priority, self.jobs[i].next_at, self.jobs[i].created, i),
        )
        ids = [r.id for r in leased]
        assert ids == candidates[:limit]  # the first in lease order, each once
        for job_id in ids:
            self.jobs[job_id].owner = owner

    @rule(owner=OWNERS, job_id=IDS)
    def accept(self, owner: str, job_id: str) -> None:
        ok = self.run(self.store.mark_running(job_id, owner, self.now))
        job = self.jobs.get(job_id)
        assert ok == (job is not None and job.state == "pending" and job.owner == owner)
        if ok:
            job.state, job.attempts = "running", job.attempts + 1

    @rule(owner=OWNERS, job_id=IDS, outcome=st.sampled_from(["succeeded", "failed", "retry"]))
    def complete(self, owner: str, job_id: str, outcome: str) -> None:
        if outcome == "retry":
            ok = self.run(self.store.retry(job_id, owner, self.now + 1, "again"))
        else:
            ok = self.run(self.store.finish(job_id, owner, outcome, self.now, outcome=b"o"))
        job = self.jobs.get(job_id)
        assert ok == (job is not None and job.state == "running" and job.owner == owner)
        if ok and outcome == "retry":
            job.state, job.owner, job.next_at = "pending", "", self.now + 1
        elif ok:
            job.state, job.owner, job.finished = outcome, "", self.now

    @rule(job_id=IDS)
    def cancel(self, job_id: str) -> None:
        record = self.run(self.store.cancel(job_id, self.now))
        job = self.jobs.get(job_id)
        assert (record is None) == (job is None)
        if job is not None and job.state == "pending":
            job.state, job.owner, job.finished = "cancelled", "", self.now

    @rule(age=st.sampled_from([0.0, 1.0, 5.0]), limit=st.integers(1, 3))
    def purge(self, age: float, limit: int) -> None:
        purged = self.run(self.store.purge(self.now - age, limit))
        eligible = {i for i, j in self.jobs.items() if j.state in TERMINAL_STATES and j.finished < self.now - age}
        left = {r.id for r in self.run(self.store.list(limit=100))}
        gone = set(self.jobs) - left
        assert gone <= eligible and purged == len(gone) == min(limit, len(eligible))
        for job_id in gone:
            del self.jobs[job_id]

    @rule(job_id=IDS)
    def requeue(self, job_id: str) -> None:
        record = self.run(self.store.requeue(job_id, self.now))
        job = self.jobs.get(job_id)
        assert (record is None) == (job is None)
        if job is not None and job.state in ("failed", "cancelled"):
            job.state, job.owner, job.next_at = "pending", "", self.now

    @rule(seconds=st.sampled_from([0.5, 3.0, 11.0]))
    def tick(self, seconds: float) -> None:
        """Time passes; an owner that stops heartbeating (crashed) loses its lease after TTL."""
        self.now += seconds

    @rule()
    def recover(self) -> None:
        revived = self.run(self.store.recover(self.now))
        alive = {owner for owner, expires in self.leases.items() if expires >= self.now}
        expected = []
        for job_id, job in self.jobs.items():
            if job.owner and job.owner not in alive:
                if job.state == "running":
                    expected.append(job_id)
                    job.state, job.next_at = "pending", self.now
                job.owner = ""
        assert sorted(revived) == sorted(expected)
        self.leases = {o: e for o, e in self.leases.items() if e >= self.now}

    @invariant()
    def store_matches_the_model(self) -> None:
        records = {r.id: r for r in self.run(self.store.list(limit=100))}
        assert set(records) == set(self.jobs)  # no job lost, none invented
        for job_id, job in self.jobs.items():
            record = records[job_id]
            assert (record.state, record.owner, record.attempts) == (job.state, job.owner, job.attempts), job_id


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
