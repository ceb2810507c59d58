"""A model of the lease loop driven event by event: no interleaving leaves a startable job pending while a
worker has room.

The real `Scheduler` on a real SQLite store, with the tick out of reach (a
lease of an hour: its backstop would come after 20 minutes), a batch of two
and at most two placements at once (so the limits bite in a few steps), and
workers that are slots the test fills and frees. Events in any order: jobs
submitted here (kept, or left to the store once the batch is full), jobs
submitted by another process (in the store, then its notice), a job ending,
a worker joining. After each event the loop gets up to 5 s to settle; the
invariant: nothing pending in the store while a slot is free.
"""

from __future__ import annotations

import asyncio
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import pool
from pool._jobs import _placements, _scheduler
from pool._jobs._scheduler import Scheduler
from pool._jobs._stores._sqlite import SQLiteStore
from pool._transport._proto import leakypool_pb2 as pb
from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually
from tests.sealing import SEAL


class Call:
    """An accepted call whose outcome the test delivers."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots
        self.done = asyncio.get_running_loop().create_future()

    def next_item(self) -> asyncio.Future[pb.Frame]:
        """Its outcome, once the test delivers it (`OutgoingCall.next_item`)."""
        outcome: asyncio.Future[pb.Frame] = asyncio.get_running_loop().create_future()
        self.done.add_done_callback(
            lambda _: outcome.done() or outcome.set_result(pb.Frame(outcome=pb.Outcome(kind=pb.Outcome.RETURN)))
        )
        return outcome

    def cancel(self) -> None:
        self.slots.end(self)

    async def abort(self, timeout: float) -> None:
        self.slots.end(self)


class Slots:
    """Workers, as the scheduler's placement sees them: a call takes a free slot or finds none."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.running: list[Call] = []

    @property
    def free(self) -> int:
        return self.count - len(self.running)

    async def place(self, task) -> Call:
        await asyncio.sleep(0)  # an Accept takes a round trip
        if not self.free:
            raise pool.NoWorkersAvailable("every slot is taken")
        call = Call(self)
        self.running.append(call)
        return call

    def end(self, call: Call) -> None:
        if call in self.running:
            self.running.remove(call)


async def no_worker(task) -> Call:
    raise pool.NoWorkersAvailable("this process has no worker")


class WakeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.saved = (_scheduler.LEASE_BATCH, _placements.MAX_PLACING)
        _scheduler.LEASE_BATCH, _placements.MAX_PLACING = 2, 2
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.TemporaryDirectory(prefix="leakypool-wakeups-")
        self.slots = Slots(1)
        self.here = self.scheduler(self.slots.place, has_workers=lambda: True)
        self.other = self.scheduler(no_worker, has_workers=lambda: False)  # an API process whose workers are elsewhere
        give_back = self.other.store.unlease

        async def given_back(*args, **kwargs):  # jobs it leased go back to the store, and a notice says so
            await give_back(*args, **kwargs)
            self.here.wake()

        self.other.store.unlease = given_back
        self.stalled = False

    def scheduler(self, place, has_workers) -> Scheduler:
        store = SQLiteStore(f"{self.directory.name}/jobs.db")
        scheduler = Scheduler(
            store, place, lambda: None, has_workers, lease_ttl=3600, default_deadline=3600, max_pending=None, seal=SEAL
        )
        self.run(store.open())
        self.run(scheduler.start())
        return scheduler

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        for call in self.slots.running:
            if not call.done.done():
                call.done.set_result(None)
        for scheduler in (self.here, self.other):
            self.run(scheduler.aclose())
            self.run(scheduler.store.close())
        self.loop.close()
        self.directory.cleanup()
        _scheduler.LEASE_BATCH, _placements.MAX_PLACING = self.saved

    async def submit(self, scheduler: Scheduler, count: int) -> None:
        await asyncio.gather(
            *(scheduler.jobs.submit(routines.add.task((1, 2), {}), routines.add.call_options) for _ in range(count))
        )

    @rule(count=st.integers(1, 5))
    def jobs_are_submitted_here(self, count):
        self.run(self.submit(self.here, count))
        self.settle()

    @rule(count=st.integers(1, 3))
    def another_process_submits_and_its_notice_arrives(self, count):
        self.run(self.submit(self.other, count))
        self.here.wake()  # what LISTEN/NOTIFY delivers on PostgreSQL
        self.settle()

    @rule(index=st.integers(0, 9))
    def a_job_ends(self, index):
        if not self.slots.running:
            return
        call = self.slots.running[index % len(self.slots.running)]
        self.slots.end(call)
        call.done.set_result(None)
        self.here.capacity_changed()  # what the pool does when a call ends (CallPath)
        self.settle()

    @rule()
    def a_worker_joins(self):
        self.slots.count += 1
        self.here.capacity_changed()  # what the pool does when membership changes
        self.settle()

    def settle(self) -> None:
        async def settled() -> bool:
            return not (await self.here.store.counts()).get("pending", 0) or not self.slots.free

        try:
            self.run(eventually(settled, timeout=5))
            self.stalled = False
        except TimeoutError:
            self.stalled = True

    @invariant()
    def no_startable_job_should_stay_pending_while_a_worker_has_room(self):
        assert not self.stalled


TestWakeMachine = WakeMachine.TestCase
TestWakeMachine.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)
