"""The call path of one pool: what every call and job attempt goes through on its way to a worker.

    routine call ──> Task ──> CallPath.dispatch(task)
                                 │ Admission.admit        ceiling (max_pending) ── AdmissionRejected
                                 │ Limits.acquire         workflow, queue key, queue total (FIFO; Deadlock)
                                 │ Admission.dispatch     FIFO queue for a worker (queue_depth, deadline)
                                 │   └ Placement.place:
                                 │       balancer.delegate(task, context=roster)
                                 v
                     ┌── candidate uid ──> connection.dispatch(task) ──> Accept ──> OutgoingCall
                     │       WorkerRejected ────┤ (transient: keep the worker)
                     │       WorkerBroken ──────┘ (hard code: evict first)
                     └──── athrow(exc) ── next candidate ... generator ends: NoWorkersAvailable

A call keeps its ticket (admission place, limit slots) until it ends; then
the slots go to the next waiters and the queue's pump tries again. A job's
attempt (`place_job`) takes the same limits and balancer but never waits
in memory: a job that does not fit stays pending in the store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._call._calls import call_failure
from .._call._task import Task
from .._errors import AdmissionRejected, CapacityTimeout, PoolClosed
from .._observe._trace import active_tracer, traced
from .._transport._outgoing import OutgoingCall
from ._admission import Admission, DeadlinePassed
from ._limits import Limits, Ticket

if TYPE_CHECKING:
    from .._observe._metrics import PoolMetrics


class CallPath:
    """Admits, limits and places the calls of one pool, and frees what each held when it ends.

    Args:
        admission: The ceiling, the queue for a worker, and placement.
        default_deadline: Seconds a call may wait before `CapacityTimeout`, unless it sets its own.
        capacity_changed: Called when a call or a job attempt ends (its worker and limit slots are free again).
        workers: How many workers the pool has now (for error messages).
        metrics: Where calls are counted (None: no metrics).
    """

    def __init__(
        self,
        admission: Admission,
        *,
        default_deadline: float,
        capacity_changed: Callable[[], None],
        workers: Callable[[], int],
        metrics: PoolMetrics | None = None,
    ) -> None:
        self.admission = admission
        self.limits = Limits()
        self.state = "new"  # the pool's: new, starting, open, closed
        self.capacity_timeouts = 0
        self.metrics = metrics
        self._default_deadline = default_deadline
        self._capacity_changed = capacity_changed
        self._workers = workers
        self._tickets: dict[OutgoingCall, Ticket] = {}
        self._job_tickets: dict[OutgoingCall, Ticket] = {}

    @property
    def in_flight(self) -> int:
        """Calls and job attempts a worker accepted that have not ended."""
        return len(self._tickets) + len(self._job_tickets)

    async def dispatch(self, task: Task, parent: OutgoingCall | None = None) -> OutgoingCall:
        """Admit ``task``, take its limit slots, and get a worker to accept it (see `WorkerPool.dispatch`)."""
        if task.trace is None and (tracer := active_tracer()) is not None:  # OpenTelemetry: see _observe/_trace
            return await traced(tracer, "call", lambda: self.dispatch(task, parent), task)  # type: ignore[return-value]
        if self.state != "open":
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is {self.state}")
        metrics = self.metrics
        try:
            ticket = self.admission.admit(task, None if parent is None else self._tickets.get(parent))
        except AdmissionRejected:
            if metrics is not None:
                metrics.rejected(task.name)
            raise
        limit = task.dispatch_deadline or self._default_deadline
        deadline = asyncio.get_running_loop().time() + limit
        timer = None  # armed only where the call may wait: its limits, the queue for a worker
        try:
            if task.queue or task.workflow:
                timer = asyncio.timeout_at(deadline)
                async with timer:
                    await self.limits.acquire(ticket)
            call = await self.admission.dispatch(ticket, deadline)
        except BaseException as exc:
            self._end(ticket, exc if isinstance(exc, Exception) else None)
            if metrics is not None and isinstance(exc, AdmissionRejected):
                metrics.rejected(task.name)
            if isinstance(exc, DeadlinePassed) or (
                isinstance(exc, TimeoutError) and timer is not None and timer.expired()
            ):
                raise self._timed_out(task, limit) from None
            raise
        self._tickets[call] = ticket
        if metrics is not None:
            ticket.accepted_at = metrics.accepted(task.name, ticket.admitted_at)
        call.on_finish(self._call_ended)
        return call

    def _timed_out(self, task: Task, limit: float) -> CapacityTimeout:
        self.capacity_timeouts += 1
        if self.metrics is not None:
            self.metrics.timed_out(task.name)
        return CapacityTimeout(
            f"{task.name}() waited {limit:g}s (dispatch_deadline) without "
            f"starting: {self.admission.waiting} calls queued for {self._workers()} workers"
        )

    def _call_ended(self, call: OutgoingCall) -> None:
        ticket = self._tickets.pop(call)
        if self.metrics is not None:
            self.metrics.ended(call, ticket.task.name, ticket.accepted_at)
        self._end(ticket, call_failure(call, ticket.task.name) if ticket.task.halt_on_error else None)

    def _end(self, ticket: Ticket, error: BaseException | None) -> None:
        self.limits.release(ticket, error)
        self.admission.release(ticket)
        self._capacity_changed()  # the queue's pump, and the job scheduler: a worker has room again

    async def place_job(self, task: Task) -> OutgoingCall | None:
        """One dispatch attempt for a job: its limits if free (else None), then the balancer.

        Raises:
            PoolClosed: the pool is not open.
            NoWorkersAvailable: no worker accepted it.
        """
        if task.trace is None and (tracer := active_tracer()) is not None:
            return await traced(tracer, "job", lambda: self.place_job(task), task)
        if self.state != "open":
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is {self.state}")
        ticket = Ticket(task, None, time.monotonic())
        task.prefetch = 0  # an attempt never waits inside a worker: the store is its queue (running = started)
        if (task.queue or task.workflow) and not self.limits.try_acquire(ticket):
            return None
        try:
            call = await self.admission.placement.place(task)
        except BaseException:
            self.limits.release(ticket)
            raise
        self._job_tickets[call] = ticket
        if self.metrics is not None:
            ticket.accepted_at = self.metrics.accepted(task.name, ticket.admitted_at)
        call.on_finish(self._job_ended)
        return call

    def _job_ended(self, call: OutgoingCall) -> None:
        ticket = self._job_tickets.pop(call)
        if self.metrics is not None:
            self.metrics.ended(call, ticket.task.name, ticket.accepted_at)
        self.limits.release(ticket, call_failure(call, ticket.task.name) if ticket.task.halt_on_error else None)
        self._capacity_changed()
