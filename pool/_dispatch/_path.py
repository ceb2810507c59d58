"""The call path of one pool: one owner for every decision a call meets on its way to a worker.

    routine call ──> CallRecord ──> CallPath.call (a coroutine routine's whole call) / CallPath.dispatch (an accepted call)
       admit      ceiling: admitted (running + waiting) < max_pending? ─── no ──> AdmissionRejected, at once
       limits     workflow, queue key, queue total (FIFO; Deadlock; `_limits`)
       place      the balancer's order (`order`, or its `delegate` driven here), the known full skipped:
                    open the call on the first candidate's stream ──> its first answer:
                        Accept ──> the call is running
                        Reject (busy, draining) ──> full? known full until it says "room"; the next candidate
                        WorkerBroken ──> evicted; the next candidate
       wait       no worker took it: a place in the line (priority, then arrival; `queue_depth`, else the lobby
                  for `admission_timeout`), until `dispatch_deadline`. The head of the line gets a turn when
                  capacity may have freed (a call ended, a worker joined or said "room"; at least every
                  `BACKSTOP_S`): it places (and leaves, and the next gets its turn) or waits for the next.
       end        the outcome; the ticket's limit slots and place given back; the next in line gets a turn

`CallPath` holds every piece of state those decisions read: the admission
counts, the line, what each worker has room for (`RoomBook`: who turned this
pool away; `PlainSlots`: this pool's plain calls on each worker), the
balancer and the limits. The only awaits are the caller's own: a candidate's
first answer, a turn in the line, a limit's slot. No task of its own runs
the line: the head's caller tries when its turn comes.

A plain call needs no round trip to be placed: the pool knows each worker's
places (`PlainSlots`: idle workers first, then places in line, each pass in
the balancer's order). The head of the line sends it and leaves the line at
once, so the next call goes without waiting for this one's answer; a call
turned away goes back to its place. The worker decides whether a queued
call starts; one a worker hands back (it retires, or the pool asked for it
back for a worker that went idle) is placed again, keeping its place.

A job's attempt (`place_job`) takes the same limits and placement but never
waits in memory: a job that does not fit stays pending in the store.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import itertools
import sys
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

from balancer import LoadBalancerLike

from .._base import DRAINING_MESSAGE
from .._call import (
    CANCEL_CONFIRM_S,
    PLAIN_ABORT_S,
    CallRecord,
    WorkerConnection,
    call_failure,
    judge_first,
    outcome_result,
)
from .._errors import (
    AdmissionRejected,
    CapacityTimeout,
    NoWorkersAvailable,
    PoolClosed,
    VersionMismatch,
    WorkerBroken,
    WorkerRejected,
)
from .._observe import active_tracer, traced
from .._transport import MISMATCH_MESSAGE, QUEUED, HandedBack, OutgoingCall, WorkerMetadata
from .._transport import leakypool_pb2 as pb
from ._limits import Limits, Ticket
from ._membership import Membership
from ._roster import PlainSlots, Roster

if TYPE_CHECKING:
    from .._observe import PoolMetrics

BACKSTOP_S: Final[float] = 1.0
"""While calls wait, the head of the line tries at least this often even without a capacity event.

Capacity events cover task-count backpressure completely; the backstop is
for hooks whose verdict changes with nothing finishing (memory, time), and
it offers workers known full again (a worker that owes a Room and never
sends one, say an older release, costs a waiting call at most this long)."""

DURATION_HALF_LIFE: Final[float] = 0.1
"""Weight of the newest call in the running mean duration (for retry_after)."""

NO_TIMER_BEYOND_S: Final[float] = 365 * 24 * 3600.0
"""A wait bounded further off than this arms no timer (`pool.Executor`'s calls wait without a bound: one
loop timer less per call)."""

OVERDUE_GRACE_S: Final[float] = 0.25
"""After a plain call's deadline, how long its worker gets to exit by itself before the pool kills it (a worker
that can run its own deadline answers within a switch interval; one stuck in C code holding the GIL cannot)."""

_UNBOUNDED: Final = contextlib.nullcontext()
"""A call without a timeout (or a wait without a deadline) arms no timer."""

Offer = tuple[uuid.UUID, WorkerConnection, int, OutgoingCall]
"""A call just sent to a worker: (its uid, its connection, the room epoch at the offer, the call)."""


def _runs(worker: WorkerMetadata, task: CallRecord) -> bool:
    """Whether ``worker`` may run ``task`` (issue 54): it runs the task's build, if the task names one, and the
    Python that made the task's code by value, if it carries any (a record silent on its Python may: it says so)."""
    if task.build and worker.build != task.build:
        return False
    return not task.interpreter or not worker.interpreter or worker.interpreter == task.interpreter


class DeadlinePassed(Exception):
    """A waiting call's dispatch deadline passed before a worker accepted it (the caller raises `CapacityTimeout`)."""


class _Waiter:
    """A call in the line (or the lobby before it): its turn, and why it must stop waiting, if it must."""

    __slots__ = ("error", "placed", "ticket", "turn")

    def __init__(self, ticket: Ticket, loop: asyncio.AbstractEventLoop) -> None:
        self.ticket = ticket
        self.turn: asyncio.Future[None] = loop.create_future()  # set when it may try (the head, or a place freed)
        self.placed: asyncio.Future[None] | None = None  # only a call waiting in the lobby has one
        self.error: BaseException | None = None  # set (and the turn too) when it must stop waiting

    def wake(self) -> None:
        if not self.turn.done():
            self.turn.set_result(None)


def _order(waiter: _Waiter) -> tuple[int, int]:
    """Higher priority first, then admission order (FIFO within a priority)."""
    return -waiter.ticket.task.priority, waiter.ticket.seq


def _insert(line: list[_Waiter], waiter: _Waiter) -> None:
    """Put ``waiter`` in ``line`` by priority, then admission order (usually at the end)."""
    if not line or _order(line[-1]) < _order(waiter):
        line.append(waiter)
    else:
        bisect.insort(line, waiter, key=_order)


class CallPath:
    """Admits, limits, places and queues the calls of one pool; frees what each held when it ends.

    Args:
        balancer: Orders the candidates (its `OrderedBalancer.order` when it has one, else its ``delegate``).
        membership: Keeps the roster; told of reachability and evictions.
        close: Closes the connections of evicted workers.
        queue_depth: Calls that may wait for a worker; 0: none (fail fast).
        admission_timeout: Seconds a call waits for a place in a full line.
        max_pending: Calls admitted at once (running + waiting); None: no ceiling.
        default_deadline: Seconds a call may wait before `CapacityTimeout`, unless it sets its own.
        plain_prefetch: Plain calls of ours a busy worker may hold behind its running one.
        freed: Called when a call or a job attempt ends (a worker and limit slots have room again).
        starved: Called when calls found no worker (grow the pool).
        coming: Whether a worker is on its way (wait for it even without a queue).
        stranded: Why no worker can come (every waiting call ends with it), or None.
        overdue: Called with a worker past a plain call's hard timeout (kill and replace it).
        build: This process's build: a call that names none runs there (only on workers of that build).
    """

    def __init__(
        self,
        balancer: LoadBalancerLike,
        membership: Membership,
        close: Callable[[Iterable[WorkerConnection]], None],
        *,
        queue_depth: int,
        admission_timeout: float,
        max_pending: int | None,
        default_deadline: float,
        plain_prefetch: int = 0,
        freed: Callable[[], None] | None = None,
        starved: Callable[[], object] = lambda: None,
        coming: Callable[[set[uuid.UUID]], bool] = lambda draining: False,
        stranded: Callable[[], BaseException | None] = lambda: None,
        overdue: Callable[[uuid.UUID], object] | None = None,
        build: str = "",
    ) -> None:
        self.balancer = balancer
        self.build = build
        order = getattr(balancer, "order", None)
        self._order: Callable[..., Iterable[uuid.UUID]] | None = order if callable(order) else None
        self._membership = membership
        self.roster: Roster = membership.roster
        self._workers = self.roster.workers  # (a live read-only view: read without a property call)
        self.room = self.roster.room
        self.plain = PlainSlots(self.roster, plain_prefetch)
        self.limits = Limits()
        self.queue_depth = queue_depth
        self.admission_timeout = admission_timeout
        self.max_pending = max_pending
        self._default_deadline = default_deadline
        self._close = close
        self._freed = freed
        self._starved = starved
        self._coming = coming
        self._stranded = stranded
        self._overdue = overdue
        self.state = "new"  # the pool's: new, starting, open, closed
        self.metrics: PoolMetrics | None = None
        self._closed: PoolClosed | None = None
        # Counts, for stats() and the metrics.
        self.admitted = 0
        self.rejected = 0
        self.dispatched = 0
        self.capacity_timeouts = 0
        self.mean_duration = 1.0
        self.draining: set[uuid.UUID] = set()  # workers that turned a call away as draining (pruned by the pool)
        # The line: waiting for a worker (by priority, then arrival), and the lobby, waiting for a place in it.
        self._line: list[_Waiter] = []
        self._lobby: list[_Waiter] = []
        self._arrivals = itertools.count()
        self._trying: _Waiter | None = None  # the head, while it tries
        self._again = False  # capacity may have freed while the head tried: it tries again at once
        self._backstop: asyncio.TimerHandle | None = None
        self._last: BaseException | None = None  # the last refusal of this loop turn's placement (a cause)
        self._tickets: dict[OutgoingCall, Ticket] = {}  # calls accepted through `dispatch`, until they end
        self._running = 0  # calls and job attempts accepted that have not ended

    # -- counts --------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Calls and job attempts a worker accepted that have not ended."""
        return self._running

    @property
    def waiting(self) -> int:
        """Calls waiting for a worker (or for a place in the line)."""
        return len(self._line) + len(self._lobby)

    def retry_after(self) -> float:
        """Seconds until a place is likely to free: one mean call duration spread over the running calls."""
        running = max(1, self.admitted - self.waiting)
        return round(min(60.0, max(0.05, self.mean_duration / running)), 3)

    # -- a call --------------------------------------------------------------------------------

    def call(self, task: CallRecord, *, as_data: bool = False) -> Coroutine[Any, Any, Any]:
        """Run a coroutine routine's ``task`` to its end (await it): its value, or the exception it raised.

        The task's timeout bounds the whole call, waiting included; on expiry
        the remote task is cancelled and `TimeoutError` raised. Cancelling
        the caller cancels the remote task and waits (briefly) for it to stop.
        A plain call's deadline also goes to the worker, which enforces it.

        With ``as_data``, the routine's outcome is returned as data, ``(True,
        value)`` or ``(False, the exception it raised)``: whatever it raised
        (`SystemExit`, `CancelledError` ...) is then never this coroutine's
        control flow; only what happens on this side raises (the caller
        cancelled, the worker lost, the timeout).
        """
        task.arrival = None  # a new call: a new place in the line (placed again after a handback, it keeps it)
        if not task.build:
            task.build = self.build  # it names this process's code: a worker of another build declines it
        if task.timeout is None:
            return self._call(task, as_data)  # (no timer, and no frame for one)
        return self._bounded(task, as_data)

    async def _bounded(self, task: CallRecord, as_data: bool) -> Any:
        assert task.timeout is not None  # noqa: S101 - `call` sends only such a task here
        task.deadline = time.monotonic() + task.timeout  # sent as the time left: a worker enforces a plain call's
        async with asyncio.timeout(task.timeout):
            return await self._call(task, as_data)

    async def _call(self, task: CallRecord, as_data: bool) -> Any:
        """`call`'s one coroutine. The common case (an open pool, a balancer with an order, no limit, no tracer,
        nobody waiting ahead) places inline, without `dispatch`: one frame per call from here to the worker."""
        call: OutgoingCall | None = None
        ticket: Ticket | None = None
        order = self._order
        if (
            order is not None
            and self.state == "open"
            and not (task.queue or task.workflow)
            and ("opentelemetry.trace" not in sys.modules or task.trace is not None or active_tracer() is None)
        ):
            ticket = self.admit(task, None)
            try:
                tried = False
                if not task.plain and (not (self._line or self._lobby) or not self.queue_depth):
                    self._last = None
                    workers = self._workers
                    for uid in order(task, context=self.roster):  # (`_offers`, inline)
                        entry = workers.get(uid)
                        if entry is None or ((task.build or task.interpreter) and not _runs(entry[0], task)):
                            continue
                        offer = self._send(uid, entry[1], task)
                        try:
                            item = await offer[3].next_item()
                        except BaseException:
                            offer[3].cancel()  # its caller gave up while it was on its way
                            raise
                        call = self._judged(offer, item, task)
                        if call is not None:
                            break
                    tried = True
                if call is None:
                    call = await self._place_or_wait(ticket, self._deadline(task), tried=tried)
            except DeadlinePassed:
                self._ended(ticket, None, None)
                raise self._timed_out(task) from None
            except BaseException as exc:
                self._ended(ticket, None, exc if isinstance(exc, Exception) else None)
                self._count_refusal(exc, task)
                raise
            self._running += 1
            if self.metrics is not None:
                ticket.accepted_at = self.metrics.accepted(task.name, ticket.admitted_at)
        else:
            call = await self.dispatch(task)
        while True:
            try:
                item = await call.next_item()
            except BaseException:  # the caller was cancelled (or timed out): the remote task too
                await call.abort(PLAIN_ABORT_S if task.plain else CANCEL_CONFIRM_S)
                if ticket is not None:
                    self._ended(ticket, call, None)
                raise
            if isinstance(item, HandedBack):  # a queued plain call came back unstarted: placed again
                if ticket is not None:
                    self._ended(ticket, call, None)
                    ticket = None
                call = await self.dispatch(task)
                continue
            if ticket is not None:
                self._ended(ticket, call, None)
            if isinstance(item, BaseException):
                raise item
            outcome = outcome_result(item.outcome, task.name)
            if as_data:
                return outcome
            if not outcome[0]:
                raise outcome[1]
            return outcome[1]

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """Admit ``task``, take its limit slots, and get a worker to accept it; the call ends the ticket.

        Raises:
            PoolClosed: the pool is not open.
            AdmissionRejected: over the ceiling, or the line stayed full.
            NoWorkersAvailable: no worker accepted it and there is no queue.
            CapacityTimeout: it waited past its dispatch deadline.
            Deadlock: it needs a slot only its own callers hold.
            WorkflowHalted: an earlier call of its workflow failed (halt_on_error).
        """
        if task.trace is None and (tracer := active_tracer()) is not None:  # OpenTelemetry: see _observe/_trace
            return await traced(tracer, "call", lambda: self.dispatch(task, parent), task)  # type: ignore[return-value]
        if self.state != "open":
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is {self.state}")
        if not task.build:
            task.build = self.build
        ticket = self.admit(task, None if parent is None else self._tickets.get(parent))
        deadline = self._deadline(task)
        timer = None  # armed only where the call may wait: its limits (the line arms its own)
        try:
            if task.queue or task.workflow:
                timer = asyncio.timeout_at(deadline)
                async with timer:
                    await self.limits.acquire(ticket)
            call = await self._place_or_wait(ticket, deadline)
        except BaseException as exc:
            self._ended(ticket, None, exc if isinstance(exc, Exception) else None)
            if isinstance(exc, DeadlinePassed) or (
                isinstance(exc, TimeoutError) and timer is not None and timer.expired()
            ):
                raise self._timed_out(task) from None
            self._count_refusal(exc, task)
            raise
        self._running += 1
        if self.metrics is not None:
            ticket.accepted_at = self.metrics.accepted(task.name, ticket.admitted_at)
        self._tickets[call] = ticket
        call.on_finish(self._dispatched_ended)
        return call

    def _deadline(self, task: CallRecord) -> float:
        """When (loop time) ``task`` must have been accepted by: its dispatch deadline from now."""
        return asyncio.get_running_loop().time() + (task.dispatch_deadline or self._default_deadline)

    def _count_refusal(self, exc: BaseException, task: CallRecord) -> None:
        """Count a call the line refused (a full queue) in the metrics (the ceiling counts its own in `admit`)."""
        if isinstance(exc, AdmissionRejected) and self.metrics is not None:
            self.metrics.rejected(task.name)

    def _timed_out(self, task: CallRecord) -> CapacityTimeout:
        self.capacity_timeouts += 1
        if self.metrics is not None:
            self.metrics.timed_out(task.name)
        limit = task.dispatch_deadline or self._default_deadline
        return CapacityTimeout(
            f"{task.name}() waited {limit:g}s (dispatch_deadline) without "
            f"starting: {self.waiting} calls queued for {len(self.roster)} workers"
        )

    def admit(self, task: CallRecord, parent: Ticket | None) -> Ticket:
        """Count a new call in, or refuse it at once if the ceiling is reached.

        Raises:
            AdmissionRejected: ``max_pending`` calls are already admitted.
        """
        if self.max_pending is not None and self.admitted >= self.max_pending:
            self.rejected += 1
            if self.metrics is not None:
                self.metrics.rejected(task.name)
            raise AdmissionRejected(
                f"{task.name}() refused: {self.admitted} calls already admitted "
                f"(max_pending={self.max_pending}); retry after ~{self.retry_after():.2f}s",
                retry_after=self.retry_after(),
            )
        self.admitted += 1
        if task.arrival is None:  # (a call handed back unstarted keeps its place: it waits where it was)
            task.arrival = next(self._arrivals)
        return Ticket(task, parent, time.monotonic(), task.arrival)

    def _dispatched_ended(self, call: OutgoingCall) -> None:
        self._ended(self._tickets.pop(call), call, None)

    def _ended(self, ticket: Ticket, call: OutgoingCall | None, error: BaseException | None) -> None:
        """``ticket``'s call ended (``call``: it had been accepted; ``error``: it never was): free what it held."""
        task = ticket.task
        if call is not None:
            self._running -= 1
            if self.metrics is not None:
                self.metrics.ended(call, task.name, ticket.accepted_at)
            if task.halt_on_error:
                error = call_failure(call, task.name)
        if ticket.held:
            self.limits.release(ticket, error)
        self.admitted -= 1
        self.mean_duration += DURATION_HALF_LIFE * (time.monotonic() - ticket.admitted_at - self.mean_duration)
        if self._line or self.plain.refusing:
            self.capacity_changed()
        if self._freed is not None:
            self._freed()  # the job scheduler: a worker may have room again

    # -- a job's attempt -------------------------------------------------------------------------

    async def place_job(self, task: CallRecord) -> OutgoingCall | None:
        """One dispatch attempt for a job: its limits if free (else None), then the balancer, once.

        Raises:
            PoolClosed: the pool is not open.
            NoWorkersAvailable: no worker accepted it.
        """
        if task.trace is None and (tracer := active_tracer()) is not None:
            return await traced(tracer, "job", lambda: self.place_job(task), task)
        if self.state != "open":
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is {self.state}")
        if not task.build:
            task.build = self.build  # an unpinned job (or one from an unversioned process) runs this process's build
        ticket = Ticket(task, None, time.monotonic())
        task.prefetch = 0  # an attempt never waits inside a worker: the store is its queue (running = started)
        if (task.queue or task.workflow) and not self.limits.try_acquire(ticket):
            return None
        try:
            call = await self._place(task)
        except BaseException:
            self.limits.release(ticket)
            raise
        self._running += 1
        if self.metrics is not None:
            ticket.accepted_at = self.metrics.accepted(task.name, ticket.admitted_at)
        call.on_finish(functools.partial(self._job_ended, ticket))
        return call

    def _job_ended(self, ticket: Ticket, call: OutgoingCall) -> None:
        self._running -= 1
        task = ticket.task
        if self.metrics is not None:
            self.metrics.ended(call, task.name, ticket.accepted_at)
        self.limits.release(ticket, call_failure(call, task.name) if task.halt_on_error else None)
        self.capacity_changed()
        if self._freed is not None:
            self._freed()

    # -- placement: one pass over the workers ------------------------------------------------------

    async def _place(self, task: CallRecord) -> OutgoingCall:
        """Get ``task`` accepted by one worker, trying them in the balancer's order (every pass, for a plain call).

        Raises:
            PoolClosed: the pool closed.
            NoWorkersAvailable: none accepted it (the last refusal is its cause).
        """
        if self._closed is not None:
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is closed")
        self._last = None
        for context in self._passes(task):
            if self._order is not None:
                for offer in self._offers(task, context):
                    call = await self._answer(offer, task)
                    if call is not None:
                        return call
            else:
                call = await self._delegate(task, context)
                if call is not None:
                    return call
        raise self._none_took(task)

    def _passes(self, task: CallRecord) -> Iterator[Any]:
        """The views of the roster a task's balancer gets, in turn: the roster; for a plain call, the idle workers,
        then the places in line (`PlainSlots`)."""
        if not task.plain:
            yield self.roster
            return
        for room in self.plain.rooms(task):
            if room == 1 and self.plain.none_idle():
                continue  # every worker runs one of ours: the idle pass could offer no one (no balancer call)
            yield self.plain.view(room)

    def _offers(self, task: CallRecord, context: Any) -> Iterator[Offer]:
        """Send ``task`` to each candidate of the balancer's order in turn, as the caller asks for the next."""
        assert self._order is not None  # noqa: S101 - an invariant: only a balancer with an order comes here
        workers = self._workers
        for uid in self._order(task, context=context):
            entry = workers.get(uid)
            # (one that left the pool since the balancer looked is passed over; so is one of another build, or
            # of another Python for a call that carries code by value)
            if entry is not None and (not (task.build or task.interpreter) or _runs(entry[0], task)):
                yield self._send(uid, entry[1], task)

    def _send(self, uid: uuid.UUID, connection: WorkerConnection, task: CallRecord) -> Offer:
        """Send ``task`` to worker ``uid`` now (its first answer says whether it took it)."""
        epochs = self.room.epochs
        epoch = epochs.get(uid, 0) if epochs else 0  # (`RoomBook.offer`, without a call while no room was announced)
        call = connection.open(task)
        if task.plain:
            self.plain.taken(uid, call)  # a place of ours there, from now until the call ends there
            call.on_finish(functools.partial(self._plain_ended, uid, task))
        return uid, connection, epoch, call

    def _judged(self, offer: Offer, item: Any, task: CallRecord) -> OutgoingCall | None:
        """The call of ``offer`` if its first answer, ``item``, says the worker took it; None if it turned it away."""
        uid, connection, epoch, call = offer
        if type(item) is not pb.Frame or item.WhichOneof("body") != "accept":  # (an Accept is the common answer)
            try:
                judge_first(call, item, task.name)
            except (WorkerRejected, WorkerBroken) as exc:
                self._last = exc
                self._refused(uid, connection, exc, epoch, task.plain)
                return None
        unreachable = self._membership.unreachable_since
        if unreachable and uid in unreachable:
            self._membership.reachable(uid)
        self.dispatched += 1
        if task.plain and call.state == QUEUED:
            self.queued(uid)
        return call

    async def _delegate(self, task: CallRecord, context: Any) -> OutgoingCall | None:
        """One pass of a balancer without an `order`, driving its ``delegate`` (wool's protocol): the call a worker
        took, or None."""
        delegation = self.balancer.delegate(task, context=context)
        try:
            uid = await anext(delegation)
            while True:
                entry = self.roster.workers.get(uid)
                if entry is None or ((task.build or task.interpreter) and not _runs(entry[0], task)):  # (`_offers`)
                    uid = await delegation.asend(None)
                    continue
                call = await self._answer(self._send(uid, entry[1], task), task)
                if call is None:
                    assert self._last is not None  # noqa: S101 - `_judged` records the refusal
                    uid = await delegation.athrow(self._last)
                    continue
                try:
                    await delegation.asend(uid)
                except StopAsyncIteration:
                    return call
                call.cancel()
                raise RuntimeError(f"{self.balancer!r} offered another worker after a success")
        except StopAsyncIteration:
            return None
        finally:
            await delegation.aclose()

    def _none_took(self, task: CallRecord) -> NoWorkersAvailable:
        last, self._last = self._last, None
        mismatch = self._mismatch(task, last)
        if mismatch is not None:
            return mismatch
        if not self.roster:
            error = NoWorkersAvailable(f"no worker to run {task.name}(): the pool is empty")
        elif last is None and self.room.known_full:
            error = NoWorkersAvailable(
                f"no worker has room for {task.name}(): {len(self.room)} of {len(self.roster)} "
                "turned this pool away and have not announced room since"
            )
        else:
            error = NoWorkersAvailable(f"no worker accepted {task.name}(): {len(self.roster)} busy or unavailable")
        error.__cause__ = last
        return error

    def _mismatch(self, task: CallRecord, last: BaseException | None) -> VersionMismatch | None:
        """`VersionMismatch` if no member may run ``task`` (`_runs`: its build, its code's Python), else None.

        A member whose record does not name its interpreter (an older
        release) counts as matching unless the last refusal (``last``) was a
        worker declining the call for its version.
        """
        if not (task.build or task.interpreter) or not self.roster:
            return None
        declined = last is not None and MISMATCH_MESSAGE in str(last)
        members = [meta for meta, _ in self._workers.values()]
        if any(_runs(meta, task) and not (declined and task.interpreter and not meta.interpreter) for meta in members):
            return None
        wanted, have, fixes = [], set(), []
        if task.build:
            wanted.append(f"build {task.build}")
            have |= {f"build {meta.build or '(none)'}" for meta in members}
            fixes.append(f"start workers of build {task.build} (LEAKYPOOL_BUILD)")
        if task.interpreter:
            wanted.append(task.interpreter)
            have |= {meta.interpreter for meta in members if meta.interpreter}
            fixes.append(
                f"add workers of {task.interpreter}, or make the code importable on the workers (a module of its own)"
            )
        carries = (
            " (its code is pickled by value: a function of __main__, a lambda or a closure, among it or its arguments)"
            if task.interpreter
            else ""
        )
        return VersionMismatch(
            f"{task.name}() needs a worker of {' and '.join(wanted)}{carries}, and no worker of the pool runs it "
            f"(they run {', '.join(sorted(have)) or 'another'}): {'; or '.join(fixes)}"
        )

    def _refused(
        self, uid: uuid.UUID, connection: WorkerConnection, exc: WorkerRejected | WorkerBroken, epoch: int, plain: bool
    ) -> None:
        """Worker ``uid`` turned a call away (or its stream failed first): what that says of the worker."""
        if isinstance(exc, WorkerRejected) and f": {DRAINING_MESSAGE}" in str(exc):
            self.draining.add(uid)
        if isinstance(exc, WorkerBroken):
            self._close(self._membership.evict(uid, str(exc), graceful=False))
        elif connection.broken:
            self._membership.unreachable(connection.metadata, exc)
        elif exc.full:
            self.room.rejected(uid, epoch)  # full by its count: it remembers us and owes us a Room
        if plain and not (isinstance(exc, WorkerRejected) and exc.full):
            self.plain.refuse(uid)  # passed over by plain calls until one of ours ends there, or the backstop

    # -- the line ------------------------------------------------------------------------------

    async def _place_or_wait(self, ticket: Ticket, deadline: float, *, tried: bool = False) -> OutgoingCall:
        """Get ``ticket``'s task accepted, waiting in the line if need be, until ``deadline`` (loop time).

        A call that finds a worker at once sets no timer: only a call that
        waits has its deadline armed. ``tried``: every worker was just offered
        it in vain (`call` placed it inline), with nobody ahead of it.

        Raises:
            NoWorkersAvailable: no worker accepted it and there is no queue.
            AdmissionRejected: the line stayed full for ``admission_timeout``.
            DeadlinePassed: it waited past ``deadline``.
        """
        task = ticket.task
        plain = task.plain
        ahead = bool(self._line or self._lobby)
        # Straight to the workers when nobody waits ahead, and always without a queue (a call that is not
        # plain never waits behind others then: it fails, or waits only for a worker on its way).
        if not ahead or not (self.queue_depth or plain):
            none: NoWorkersAvailable | None = None
            if tried:
                none = self._none_took(task)
            elif plain and self._order is not None:
                call = await self._send_plain(task)
                if call is not None:
                    return call
            else:
                try:
                    return await self._place(task)
                except NoWorkersAvailable as exc:
                    none = exc
            if isinstance(none, VersionMismatch):
                raise none  # at once: waiting would not bring a worker of that Python
            if none is not None:
                self._starved()  # grow the pool if it may, queue or not
                if (error := self._stranded()) is not None:
                    raise error  # its own cause (the initializer's exception) stays
                if not (self.queue_depth or plain) and not self._coming(self.draining):
                    raise none
            tried = True
        loop = asyncio.get_running_loop()
        waiter = _Waiter(ticket, loop)
        timer = asyncio.timeout_at(deadline) if deadline - loop.time() < NO_TIMER_BEYOND_S else None
        try:
            async with timer if timer is not None else _UNBOUNDED:
                await self._take_place(waiter, tried=tried)
                return await self._in_line(waiter)
        except TimeoutError:
            if timer is not None and timer.expired():
                raise DeadlinePassed from None
            raise

    async def _answer(self, offer: Offer, task: CallRecord) -> OutgoingCall | None:
        """The first answer to the call of ``offer``, judged (`_judged`); a caller that gives up meanwhile cancels it."""
        try:
            item = await offer[3].next_item()
        except BaseException:
            offer[3].cancel()  # its caller gave up while it was on its way
            raise
        return self._judged(offer, item, task)

    async def _send_plain(self, task: CallRecord) -> OutgoingCall | None:
        """A plain call sent to the first worker with a place for it (`_passes`), and its answer: the call, if the
        worker took it; None if no worker had a place, or the one sent to turned it away."""
        for context in self._passes(task):
            for offer in self._offers(task, context):
                return await self._answer(offer, task)
        return None

    async def _in_line(self, waiter: _Waiter) -> OutgoingCall:
        """Wait for turns as the head of the line and try at each; the call once a worker took it."""
        task = waiter.ticket.task
        sync_plain = task.plain and self._order is not None
        try:
            while True:
                await waiter.turn
                if waiter.error is not None:
                    raise waiter.error
                self._trying = waiter
                self._again = False
                if sync_plain:
                    offer = next((o for context in self._passes(task) for o in self._offers(task, context)), None)
                    if offer is None:
                        self._missed(waiter)
                        continue
                    self._leave(waiter)  # sent: the next call goes at once, without waiting for this one's answer
                    self._done_trying()
                    call = await self._answer(offer, task)
                    if call is not None:
                        return call
                    self._back(waiter)  # turned away: back to its place; it tries again in its turn
                    continue
                try:
                    call = await self._place(task)
                except VersionMismatch:
                    raise  # at once: waiting would not bring a worker of that Python
                except NoWorkersAvailable:
                    self._missed(waiter)
                    continue
                self._leave(waiter)
                self._done_trying()
                return call
        except BaseException:
            self._leave(waiter)
            if self._trying is waiter:
                self._done_trying()
            raise

    async def _take_place(self, waiter: _Waiter, *, tried: bool) -> None:
        # No queue_depth: only a plain call, or a call waiting for a worker on its way, comes here. ``tried``: just
        # offered in vain with nothing ahead of it (it tries again at the next capacity event, not now).
        if (len(self._line) < self.queue_depth or not self.queue_depth) and not self._lobby:
            self._enqueue(waiter, tried=tried)
            return
        name = waiter.ticket.task.name
        if not self.admission_timeout:
            self.rejected += 1
            raise AdmissionRejected(
                f"{name}() refused: the queue is full ({len(self._line)} waiting)", retry_after=self.retry_after()
            )
        placed = waiter.placed = asyncio.get_running_loop().create_future()
        _insert(self._lobby, waiter)
        try:
            async with asyncio.timeout(self.admission_timeout):
                await asyncio.shield(placed)
        except TimeoutError:
            if not placed.done():
                self._lobby.remove(waiter)
                self.rejected += 1
                raise AdmissionRejected(
                    f"{name}() refused: the queue stayed full ({len(self._line)} waiting) for "
                    f"{self.admission_timeout:g}s",
                    retry_after=self.retry_after(),
                ) from None
        except BaseException:
            self._leave(waiter)
            raise

    def _enqueue(self, waiter: _Waiter, *, tried: bool = False) -> None:
        _insert(self._line, waiter)
        if waiter.placed is not None and not waiter.placed.done():
            waiter.placed.set_result(None)
        if tried:
            self._arm_backstop()
        else:
            self._kick()

    def _back(self, waiter: _Waiter) -> None:
        """A plain call sent from the line was turned away: back to its place (it keeps its arrival order)."""
        waiter.turn = asyncio.get_running_loop().create_future()
        _insert(self._line, waiter)
        self._kick()

    def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the line or the lobby; give its place to the next in the lobby."""
        try:
            self._line.remove(waiter)
        except ValueError:
            try:
                self._lobby.remove(waiter)
            except ValueError:
                pass
            return
        while self._lobby and len(self._line) < self.queue_depth:
            self._enqueue(self._lobby.pop(0))

    def _kick(self) -> None:
        """Capacity may have freed: the head of the line gets a turn (or, trying now, tries again once done)."""
        if self._trying is not None:
            self._again = True
        elif self._line:
            self._line[0].wake()

    def _done_trying(self) -> None:
        """The head placed its call (or gave up): the next gets its turn at once, as a queue's pump serves on."""
        self._trying = None
        self._again = False
        if self._line:
            self._line[0].wake()

    def _missed(self, waiter: _Waiter) -> None:
        """The head tried in vain: grow if possible, end what cannot wait on, and wait for the next event."""
        self._trying = None
        self._starved()
        if self._give_up() or waiter.error is not None:
            return  # (it was ended: its turn is set, with the error)
        waiter.turn = asyncio.get_running_loop().create_future()
        if self._again:
            self._again = False
            waiter.wake()
        else:
            self._arm_backstop()

    def _arm_backstop(self) -> None:
        if self._backstop is None and self._line:
            self._backstop = asyncio.get_running_loop().call_later(BACKSTOP_S, self._backstop_fired)

    def _backstop_fired(self) -> None:
        self._backstop = None
        if self._line:
            self.doubt()  # nothing heard for a while: ask every worker again
            self._kick()
            self._arm_backstop()

    def _give_up(self) -> bool:
        """End the waiting calls no worker can come for; True if none is left waiting.

        Stranded (no worker can start): every waiting call ends. Without a
        queue and with no worker on its way, the calls that waited only for
        one end (`NoWorkersAvailable`); plain calls wait on for a worker's thread.
        """
        error: BaseException | None = self._stranded()
        if error is None and not self.queue_depth and not self._coming(self.draining):
            error = NoWorkersAvailable("no worker to run the call: the worker it waited for did not come")
            if any(waiter.ticket.task.plain for waiter in self._line):
                return self._end_waiting(error, lambda waiter: not waiter.ticket.task.plain)
        if error is None:
            return False
        return self._end_waiting(error, lambda waiter: True)

    def _end_waiting(self, error: BaseException, which: Callable[[_Waiter], bool]) -> bool:
        """End the waiting calls ``which`` picks with ``error``; True if none is left waiting."""
        for waiter in [w for w in self._line if which(w)]:
            self._line.remove(waiter)
            waiter.error = error
            waiter.wake()  # (a turn already set is seen the same way: it checks ``error`` first)
        for waiter in self._lobby:
            if waiter.placed is not None and not waiter.placed.done():
                waiter.placed.set_exception(error)
        self._lobby.clear()
        return not self._line

    def close(self, error: PoolClosed) -> None:
        """The pool is closing: fail every waiting call with ``error``."""
        self._closed = error
        self.state = "closed"
        self._end_waiting(error, lambda waiter: True)
        if self._backstop is not None:
            self._backstop.cancel()
            self._backstop = None

    # -- capacity events ---------------------------------------------------------------------------

    def capacity_changed(self) -> None:
        """Capacity may have freed (a call ended, a worker joined or said "room"): the line gets a turn, and
        workers that refused plain calls are offered them again."""
        if self.plain.refusing:
            self.plain.refuse(None)
        if self._line:
            self._kick()

    def doubt(self) -> None:
        """Offer every worker again, known full or not (the line's backstop, when nothing was heard)."""
        if self.plain.refusing:
            self.plain.refuse(None)
        for uid in list(self.room.known_full):
            self.room.announced(uid)

    # -- plain calls in workers' lines ---------------------------------------------------------------

    def _plain_ended(self, uid: uuid.UUID, task: CallRecord, call: OutgoingCall) -> None:
        """A plain call left worker ``uid``; one its caller gave up at its deadline may leave the worker stuck.

        The worker enforces the deadline itself (it answers `TimeoutError` and
        exits), unless its function holds the GIL in C code and nothing else
        in it can run: after `OVERDUE_GRACE_S`, a worker still in the pool is
        handed to ``overdue`` (the pool kills and replaces its own workers).
        """
        self.plain.freed(uid, call)
        if not self.plain.count(uid) and not self._line and not self._lobby:
            stolen = self.plain.queued_elsewhere(uid)  # an idle worker: no call waits behind another meanwhile
            if stolen is not None:
                stolen.hand_back()
        deadline = task.deadline
        if self._overdue is None or not call.cancelled_here or deadline is None or time.monotonic() < deadline:
            return
        asyncio.get_running_loop().call_later(OVERDUE_GRACE_S, self._still_there, uid)

    def _still_there(self, uid: uuid.UUID) -> None:
        if uid in self.roster and self._overdue is not None:
            self._overdue(uid)

    def queued(self, uid: uuid.UUID) -> None:
        """A plain call of ours was accepted queued on worker ``uid``: a worker that went idle meanwhile asks one back.

        The pool counts a call queued only once its Accept says so (which a
        worker sends late: `_worker._plain_calls.QUEUED_ACCEPT_S`), so a
        worker that went idle before it came found none to ask back. Only
        behind another call of ours: a call placed on a worker that runs none
        of ours queued behind someone else's, and asking it back for another
        such worker could go round and round.
        """
        if self.plain.count(uid) > 1:
            self.feed_idle()

    def feed_idle(self) -> None:
        """Ask a call still waiting in a busy worker's line back for each worker that runs none of ours (I/O-free).

        For a worker that joined while calls wait in other workers' lines: it
        would otherwise idle until one of them ends; and when a call's Accept
        says queued (`queued`). Only while no call waits for a worker in the
        pool's line (that one is fed to it instead). The worker decides: a
        call it started meanwhile just runs there.
        """
        if not self.plain.calls or self._line or self._lobby:
            return
        for uid in self.plain.idle():
            stolen = self.plain.queued_elsewhere(uid)
            if stolen is None:
                return
            stolen.hand_back()

    def __repr__(self) -> str:
        return (
            f"<CallPath {self.state} [{self._running} running, {self.waiting} waiting, {self.admitted} admitted | "
            f"{len(self.roster)} workers, {len(self.room)} known full]>"
        )
