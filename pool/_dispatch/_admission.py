"""Admission: a fast gate for real overload, a patient FIFO queue for bursts.

    new call ──> ceiling: admitted (running + waiting) < max_pending? ── no ──> AdmissionRejected now
                   │ yes
                   v
              limits (queues, keys, workflows; see _limits)
                   │
                   v
              anyone queued for a worker? ── no ──> try the balancer once ── accepted ──> running
                   │ yes                                  │ NoWorkersAvailable
                   v                                      v
              a place in the queue (queue_depth)? ── none: wait up to admission_timeout
                   │                                       for one, else AdmissionRejected
                   v
              FIFO queue: the pump offers the head to the balancer whenever
              capacity may have freed (a call of this pool ended, a worker
              joined, a worker said it has room), until dispatch_deadline.
              A plain call is sent without awaiting its answer (the pool knows
              each worker's places, `_sends`): the next one goes at once; one
              turned away goes back to its place in the queue.

Admission owns the whole path to a worker: it asks its `Placement` (the
balancer loop) for each call, and its pump, a task the pool's `TaskOwner`
ends, serves the queue. The pump serves waiters strictly in order, so a
burst starts in arrival order and a newcomer never jumps the queue, unless
it has a higher ``priority`` (``options(priority=...)``): the queue is
ordered by priority, then arrival (a steady stream of higher priority calls
starves lower ones; that is the contract, kept simple). Calls
that found no worker at the same moment join the queue in the order they
were admitted, whatever order their rejections came back in. A
waiter that is cancelled (or times out) leaves at once and frees its
place. With queue_depth 0 there is no queue: a call the balancer cannot
place fails with NoWorkersAvailable at once, unless a worker is on its way
(``coming``: one retiring on purpose, or its replacement starting): then
it waits for it, so a recycle never fails a call. A plain ``def`` call waits
too, without a bound (a worker turns one away while it runs another plain
call: that is the design, not overload). Calls waiting for a worker
end at once in what ``stranded`` says (a `WorkerInitError`) when no worker
is left and none can start.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Final

from .._base._tasks import TaskOwner
from .._call._task import Task
from .._errors import AdmissionRejected, NoWorkersAvailable, PoolClosed
from .._transport._outgoing import OutgoingCall
from ._limits import Ticket
from ._placement import Placement
from ._sends import Sends

_log = logging.getLogger("leakypool.pool")

BACKSTOP_S: Final[float] = 1.0
"""While calls wait, the pump retries at least this often even without a capacity event.

Capacity events cover task-count backpressure completely; the backstop is
for hooks whose verdict changes with nothing finishing (memory, time), and
it offers workers known full again (a worker that owes a Room and never
sends one, say an older release, costs a queued call at most this long)."""

DURATION_HALF_LIFE: Final[float] = 0.1
"""Weight of the newest call in the running mean duration (for retry_after)."""


class DeadlinePassed(Exception):
    """A queued call's dispatch deadline passed before a worker accepted it (the caller raises `CapacityTimeout`)."""


NO_TIMER_BEYOND_S: Final[float] = 365 * 24 * 3600.0
"""A wait bounded further off than this arms no timer (`pool.Executor`'s calls wait without a bound: one
loop timer less per call)."""

_NO_TIMER: Final = contextlib.nullcontext()


class _Waiter:
    __slots__ = ("placed", "served", "ticket")

    def __init__(self, ticket: Ticket, loop: asyncio.AbstractEventLoop) -> None:
        self.ticket = ticket
        self.placed: asyncio.Future[None] | None = None  # only a call that waits in the lobby has one
        self.served: asyncio.Future[OutgoingCall] = loop.create_future()


def _order(waiter: _Waiter) -> tuple[int, int]:
    """Higher priority first, then admission order (FIFO within a priority)."""
    return -waiter.ticket.task.priority, waiter.ticket.seq


def _insert(line: list[_Waiter], waiter: _Waiter) -> None:
    """Put ``waiter`` in ``line`` by priority, then admission order (usually at the end)."""
    if not line or _order(line[-1]) < _order(waiter):
        line.append(waiter)
    else:
        bisect.insort(line, waiter, key=_order)


class Admission:
    """The admission ceiling and the FIFO queue for a worker.

    Args:
        placement: Offers a task to the workers once (the balancer loop).
        tasks: Owns the pump.
        starved: Called when calls found no worker (grow the pool).
        queue_depth: Calls that may wait for a worker; 0: none (fail fast).
        admission_timeout: Seconds a call waits for a place in a full queue.
        max_pending: Calls admitted at once (running + waiting); None: no ceiling.
        coming: Whether a worker is on its way (wait for it even without a queue).
        stranded: Why no worker can come (every waiting call ends with it), or None.
    """

    def __init__(
        self,
        placement: Placement,
        tasks: TaskOwner,
        starved: Callable[[], object],
        *,
        queue_depth: int,
        admission_timeout: float,
        max_pending: int | None,
        coming: Callable[[], bool] = lambda: False,
        stranded: Callable[[], BaseException | None] = lambda: None,
    ) -> None:
        self.placement = placement
        self._coming = coming
        self._stranded = stranded
        self._tasks = tasks
        self._starved = starved
        self._closed: PoolClosed | None = None
        self.queue_depth = queue_depth
        self.admission_timeout = admission_timeout
        self.max_pending = max_pending
        self.admitted = 0
        self.rejected = 0
        self.mean_duration = 1.0
        self._queue: list[_Waiter] = []  # by priority, then admission order (ticket.seq)
        self._lobby: list[_Waiter] = []
        self._arrivals = itertools.count()
        self._capacity = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._sends = Sends(placement, self._back, lambda: self._closed)  # plain calls, without awaiting answers

    @property
    def waiting(self) -> int:
        """Calls queued (or waiting for a place in the queue) for a worker."""
        return len(self._queue) + len(self._lobby)

    def admit(self, task: Task, parent: Ticket | None) -> Ticket:
        """Count a new call in, or refuse it at once if the ceiling is reached.

        Raises:
            AdmissionRejected: ``max_pending`` calls are already admitted.
        """
        if self.max_pending is not None and self.admitted >= self.max_pending:
            self.rejected += 1
            raise AdmissionRejected(
                f"{task.name}() refused: {self.admitted} calls already admitted "
                f"(max_pending={self.max_pending}); retry after ~{self.retry_after():.2f}s",
                retry_after=self.retry_after(),
            )
        self.admitted += 1
        if task.arrival is None:  # (a call handed back unstarted keeps its place: it waits where it was)
            task.arrival = next(self._arrivals)
        return Ticket(task, parent, time.monotonic(), task.arrival)

    def release(self, ticket: Ticket) -> None:
        """The call ended (or never started): count it out, learn its duration."""
        self.admitted -= 1
        duration = time.monotonic() - ticket.admitted_at
        self.mean_duration += DURATION_HALF_LIFE * (duration - self.mean_duration)

    def retry_after(self) -> float:
        """Seconds until a place is likely to free: one mean call duration spread over the running calls."""
        running = max(1, self.admitted - self.waiting)
        return round(min(60.0, max(0.05, self.mean_duration / running)), 3)

    def close(self, error: PoolClosed) -> None:
        """The pool is closing: fail every waiting call with ``error`` and stop the pump."""
        self._closed = error
        for waiter in self._queue:
            if not waiter.served.done():
                waiter.served.set_exception(error)
        for waiter in self._lobby:
            if waiter.placed is not None and not waiter.placed.done():
                waiter.placed.set_exception(error)
        self._queue.clear()
        self._lobby.clear()
        if self._pump is not None:
            self._pump.cancel()

    def capacity_changed(self) -> None:
        """Capacity may have freed: let the pump try the head of the queue (workers that refused plain calls too)."""
        self.placement.doubt_refusals()
        self._capacity.set()

    async def dispatch(self, ticket: Ticket, deadline: float) -> OutgoingCall:
        """Get ``ticket``'s task accepted by a worker, queueing if need be, until ``deadline`` (loop time).

        A call that finds a worker at once sets no timer: only a call that
        waits in the queue has its deadline armed.

        Raises:
            NoWorkersAvailable: no worker accepted it and there is no queue.
            AdmissionRejected: the queue stayed full for ``admission_timeout``.
            DeadlinePassed: it waited past ``deadline``.
        """
        plain = ticket.task.plain
        if not (plain and self._sends.sync) and (not (self._queue or self._lobby) or not (self.queue_depth or plain)):
            try:
                return await self._place(ticket.task)
            except NoWorkersAvailable:
                self._starved()  # grow the pool if it may, queue or not
                if (error := self._stranded()) is not None:
                    raise error  # noqa: B904 - its own cause (the initializer's exception) stays
                if not (self.queue_depth or plain) and not self._coming():
                    raise
        loop = asyncio.get_running_loop()
        waiter = _Waiter(ticket, loop)
        timer = asyncio.timeout_at(deadline) if deadline - loop.time() < NO_TIMER_BEYOND_S else None
        try:
            async with timer if timer is not None else _NO_TIMER:
                at_once = plain and self._sends.sync and not (self._queue or self._lobby)  # (then: no place taken)
                if not (at_once and self._sends.send(waiter)):
                    await self._take_place(waiter, tried=at_once)
                try:
                    return await waiter.served
                except BaseException:
                    self._leave(waiter)
                    if waiter.served.done() and not waiter.served.cancelled() and waiter.served.exception() is None:
                        waiter.served.result().cancel()  # accepted as we gave up
                    raise
        except TimeoutError:
            if timer is not None and timer.expired():
                raise DeadlinePassed from None
            raise

    async def _take_place(self, waiter: _Waiter, *, tried: bool = False) -> None:
        # No queue_depth: only a plain call, or a call waiting for a worker on its way, comes here. ``tried``: just
        # offered in vain with nothing ahead of it (the pump offers it next, not `_enqueue` again now).
        if (len(self._queue) < self.queue_depth or not self.queue_depth) and not self._lobby:
            self._enqueue(waiter, tried=tried)
            return
        name = waiter.ticket.task.name
        if not self.admission_timeout:
            self.rejected += 1
            raise AdmissionRejected(
                f"{name}() refused: the queue is full ({len(self._queue)} waiting)", retry_after=self.retry_after()
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
                    f"{name}() refused: the queue stayed full ({len(self._queue)} waiting) for "
                    f"{self.admission_timeout:g}s",
                    retry_after=self.retry_after(),
                ) from None
        except BaseException:
            self._leave(waiter)
            raise

    def _enqueue(self, waiter: _Waiter, *, tried: bool = False) -> None:
        _insert(self._queue, waiter)
        if waiter.placed is not None and not waiter.placed.done():
            waiter.placed.set_result(None)
        if not tried and self._serve_plain():
            return  # the plain calls at the head were sent, and nothing else waits
        if self._pump is None:
            self._pump = self._tasks.spawn(self._run_pump(), name="admission pump")
        self._capacity.set()

    def _leave(self, waiter: _Waiter) -> None:
        """Take ``waiter`` out of the queue or lobby; give its place to the next in the lobby."""
        try:
            self._queue.remove(waiter)
        except ValueError:
            try:
                self._lobby.remove(waiter)
            except ValueError:
                pass
            return
        while self._lobby and len(self._queue) < self.queue_depth:
            self._enqueue(self._lobby.pop(0))

    async def _run_pump(self) -> None:
        try:
            while self._queue:
                self._capacity.clear()
                if not await self._serve():
                    self._starved()
                    if self._give_up():
                        break
                    try:
                        async with asyncio.timeout(BACKSTOP_S):
                            await self._capacity.wait()
                    except TimeoutError:
                        self.placement.doubt()  # nothing heard for a while: ask every worker again
        finally:
            self._pump = None

    def _give_up(self) -> bool:
        """End the waiting calls no worker can come for; True if none is left waiting.

        Stranded (no worker can start): every waiting call ends. Without a
        queue and with no worker on its way, the calls that waited only for
        one end (`NoWorkersAvailable`); plain calls wait on for a worker's thread.
        """
        error: BaseException | None = self._stranded()
        if error is None and not self.queue_depth and not self._coming():
            error = NoWorkersAvailable("no worker to run the call: the worker it waited for did not come")
            if any(waiter.ticket.task.plain for waiter in self._queue):
                return self._end_waiting(error, lambda waiter: not waiter.ticket.task.plain)
        if error is None:
            return False
        return self._end_waiting(error, lambda waiter: True)

    def _end_waiting(self, error: BaseException, which: Callable[[_Waiter], bool]) -> bool:
        """End the waiting calls ``which`` picks with ``error``; True if none is left waiting."""
        for waiter in [w for w in self._queue if which(w)]:
            self._queue.remove(waiter)
            if not waiter.served.done():
                waiter.served.set_exception(error)
        for waiter in self._lobby:
            if waiter.placed is not None and not waiter.placed.done():
                waiter.placed.set_exception(error)
        self._lobby.clear()
        return not self._queue

    def _place(self, task: Task) -> Coroutine[None, None, OutgoingCall]:
        if self._closed is not None:
            raise PoolClosed(f"{task.name}() was dispatched through a pool that is closed")
        return self.placement.place(task)  # (awaited by the caller: one coroutine less per call)

    def _serve_plain(self) -> bool:
        """Send the plain calls at the head of the queue while workers have places; True if the queue is empty."""
        while self._queue and self._queue[0].ticket.task.plain and self._sends.sync:
            if not self._send(self._queue[0]):
                return False
        return not self._queue

    def _send(self, waiter: _Waiter) -> bool:
        """Send ``waiter``'s plain call where a place is (`Sends`); False if none is."""
        if waiter.served.done():
            self._leave(waiter)
            return True
        if not self._sends.send(waiter):
            return False
        self._leave(waiter)
        return True

    def _back(self, waiter: _Waiter) -> None:
        """A plain call `Sends` sent was turned away: back in its place; the pump offers it again."""
        _insert(self._queue, waiter)
        if self._pump is None:
            self._pump = self._tasks.spawn(self._run_pump(), name="admission pump")
        self._capacity.set()

    async def _serve(self) -> bool:
        """Dispatch queued calls in order until one finds no worker; False if one did."""
        while self._queue:
            waiter = self._queue[0]
            if waiter.served.done():
                self._leave(waiter)
                continue
            if waiter.ticket.task.plain and self._sends.sync:
                if not self._send(waiter):
                    return False
                continue
            if not self.placement.may_take(waiter.ticket.task):
                return False  # every worker runs a plain call of ours: no offer can succeed (no round trip)
            try:
                call = await self._place(waiter.ticket.task)
            except NoWorkersAvailable:
                return False
            except Exception as exc:  # noqa: BLE001 - a placement fault reaches the waiting caller through its future
                self._leave(waiter)
                if not waiter.served.done():
                    waiter.served.set_exception(exc)
                continue
            self._leave(waiter)
            if waiter.served.done():
                call.cancel()  # its caller gave up while we dispatched it
            else:
                waiter.served.set_result(call)
        return True
