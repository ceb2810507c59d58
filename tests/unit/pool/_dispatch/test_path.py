"""Tests for pool._dispatch._path: admit, limit, place, and free what each call held when it ends.

A real `Admission`, `Placement`, `Membership` and `Limits`; each worker's connection is a small fake whose
`dispatch` accepts (a call that ends when the test says) or raises what the test says.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import pytest

import pool
from balancer import PriorityLoadBalancer
from pool._base._tasks import TaskOwner
from pool._call._task import Task
from pool._dispatch._admission import Admission
from pool._dispatch._membership import Membership
from pool._dispatch._path import CallPath
from pool._dispatch._placement import Placement
from pool._transport._outgoing import STARTED
from pool._transport._trust import Trust

WAIT_S = 5.0
UID = uuid.UUID(int=1)


class Call:
    """An accepted call that ends when the test says (`end`)."""

    def __init__(self) -> None:
        self.state = STARTED
        self.cancelled = False
        self._finish: list[Callable[[Call], object]] = []

    def on_finish(self, callback: Callable[[Call], object]) -> None:
        self._finish.append(callback)

    def cancel(self) -> None:
        self.cancelled = True

    def end(self) -> None:
        for callback in self._finish:
            callback(self)


class Connection:
    """One worker: accepts every call, or raises ``answer``."""

    def __init__(self) -> None:
        self.metadata = pool.WorkerMetadata(uid=UID, address="127.0.0.1:1")
        self.answer: BaseException | None = None
        self.broken = False

    async def dispatch(self, task: Task) -> Call:
        if self.answer is not None:
            raise self.answer
        return Call()


class Path:
    """A call path over one fake worker (or none), with its capacity events counted."""

    def __init__(self, *, workers: int = 1, max_pending: int | None = None, queue_depth: int = 0) -> None:
        self.tasks = TaskOwner("test pool", logging.getLogger("test"))
        membership = Membership(
            None,  # type: ignore[arg-type]
            credentials=None,
            trust=Trust.of("a key"),
            tags=(),
            changed=lambda: None,
            close=lambda connections: None,
            is_local=lambda uid: False,
            broken_local=lambda uid: None,
        )
        self.worker = Connection()
        if workers:
            membership.roster.add(self.worker)  # type: ignore[arg-type]
        placement = Placement(PriorityLoadBalancer(), membership.roster, membership, lambda connections: None)
        self.admission = Admission(
            placement,
            self.tasks,
            starved=lambda: None,
            queue_depth=queue_depth,
            admission_timeout=0.0,
            max_pending=max_pending,
        )
        self.capacity = 0
        self.path = CallPath(
            self.admission,
            default_deadline=WAIT_S,
            capacity_changed=self._changed,
            workers=lambda: len(membership.roster),
        )
        self.path.state = "open"

    def _changed(self) -> None:
        self.capacity += 1
        self.admission.capacity_changed()

    async def dispatch(self, task: Task) -> Call:
        return await asyncio.wait_for(self.path.dispatch(task), WAIT_S)  # type: ignore[return-value]

    async def close(self) -> None:
        self.admission.close(pool.PoolClosed("closed"))
        await self.tasks.aclose()


def task(name: str = "f", *, queue: pool.Queue | None = None, deadline: float | None = None) -> Task:
    return Task(
        name,
        False,
        b"digest",
        b"",
        b"",
        queue=queue.name if queue else "",
        concurrency=queue.concurrency if queue else 0,
        dispatch_deadline=deadline,
    )


class TestCallPath:
    @pytest.mark.parametrize("state", ["new", "starting", "closed"])
    async def test_dispatch_should_raise_pool_closed_when_the_pool_is_not_open(self, state):
        """Test that a pool not open refuses calls, naming its state."""
        path = Path()
        path.path.state = state
        with pytest.raises(pool.PoolClosed, match=f"a pool that is {state}"):
            await path.dispatch(task())
        with pytest.raises(pool.PoolClosed, match=f"a pool that is {state}"):
            await path.path.place_job(task())
        await path.close()

    async def test_dispatch_should_hold_the_calls_place_until_it_ends(self):
        """Test that an accepted call counts in flight and admitted until it ends, then frees its place."""
        path = Path()
        call = await path.dispatch(task())
        assert (path.path.in_flight, path.admission.admitted, path.capacity) == (1, 1, 0)
        call.end()
        assert (path.path.in_flight, path.admission.admitted, path.capacity) == (0, 0, 1)
        await path.close()

    async def test_dispatch_should_refuse_past_max_pending_and_admit_again_once_a_call_ends(self):
        """Test the ceiling: calls admitted at once, running or waiting, at most ``max_pending``."""
        path = Path(max_pending=2)
        calls = [await path.dispatch(task()) for _ in range(2)]
        with pytest.raises(pool.AdmissionRejected, match="max_pending=2"):
            await path.dispatch(task())
        calls[0].end()
        await path.dispatch(task())
        await path.close()

    async def test_dispatch_should_release_its_place_and_raise_when_no_worker_accepts(self):
        """Test that a call no worker took leaves nothing held behind."""
        path = Path()
        path.worker.answer = pool.WorkerRejected("worker w: busy")
        with pytest.raises(pool.NoWorkersAvailable):
            await path.dispatch(task())
        assert (path.path.in_flight, path.admission.admitted, path.capacity) == (0, 0, 1)
        await path.close()

    async def test_dispatch_should_raise_capacity_timeout_when_its_queue_slot_never_frees(self):
        """Test that a call waiting on its queue's concurrency past its dispatch deadline times out, counted."""
        path = Path()
        q = pool.Queue("db", concurrency=1)
        holder = await path.dispatch(task(queue=q))
        with pytest.raises(pool.CapacityTimeout, match=r"f\(\) waited 0.05s \(dispatch_deadline\) without starting"):
            await path.dispatch(task(queue=q, deadline=0.05))
        assert path.path.capacity_timeouts == 1
        assert path.admission.admitted == 1  # only the holder
        holder.end()
        await path.dispatch(task(queue=q))  # the slot came back
        await path.close()

    async def test_dispatch_should_raise_capacity_timeout_when_queued_for_a_worker_past_the_deadline(self):
        """Test that a call waiting in the admission queue for a busy worker times out at its deadline."""
        path = Path(queue_depth=4)
        path.worker.answer = pool.WorkerRejected("worker w: busy")
        with pytest.raises(
            pool.CapacityTimeout,
            match=r"waited 0.05s \(dispatch_deadline\) without starting: \d+ calls queued for 1 workers",
        ):
            await path.dispatch(task(deadline=0.05))
        assert (path.path.capacity_timeouts, path.admission.admitted, path.admission.waiting) == (1, 0, 0)
        await path.close()

    async def test_place_job_should_return_none_when_its_limits_are_full_and_never_wait(self):
        """Test a job attempt: it takes a free slot or returns None at once (the store is its queue)."""
        path = Path()
        q = pool.Queue("db", concurrency=1)
        job = task("job", queue=q)
        call = await asyncio.wait_for(path.path.place_job(job), WAIT_S)
        assert call is not None and job.prefetch == 0  # an attempt never waits inside a worker
        assert path.path.in_flight == 1
        assert await asyncio.wait_for(path.path.place_job(task("job", queue=q)), WAIT_S) is None
        call.end()  # type: ignore[attr-defined]
        assert path.path.in_flight == 0 and path.capacity == 1
        assert await asyncio.wait_for(path.path.place_job(task("job", queue=q)), WAIT_S) is not None
        await path.close()

    async def test_place_job_should_free_its_slot_when_no_worker_accepts(self):
        """Test that a job attempt no worker took gives its limit slot back."""
        path = Path()
        q = pool.Queue("db", concurrency=1)
        path.worker.answer = pool.WorkerRejected("worker w: busy")
        with pytest.raises(pool.NoWorkersAvailable):
            await path.path.place_job(task("job", queue=q))
        path.worker.answer = None
        assert await asyncio.wait_for(path.path.place_job(task("job", queue=q)), WAIT_S) is not None
        await path.close()
