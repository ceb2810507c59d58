"""Limits a dispatching process puts on its own calls: queues, keys, workflows.

Every limit is a `Gate`: a number of slots and a FIFO of calls waiting for
one. A call names the gates it needs through its options, and takes them
most specific first, so a call blocked on its own key never holds a slot
of the queue's total that another key could use:

    workflow "order-42"       limit 1: the workflow's calls run one at a time, in call order
    queue "db", key "acme"    limit Queue.concurrency: per key value ("" when no key)
    queue "db" (total)        limit Queue.total: across all keys, if set

then waits for a worker (see ``_admission``). A gate exists only while a
call holds or awaits it, so a million distinct keys cost nothing once idle.

The scope of every limit is one dispatching process (one `WorkerPool`).
Nested calls that routines make from inside workers come back through the
pool that dispatched their caller, so the same limits apply to them.

A caller that waits for a nested call in a limit it holds itself *lends*
its slot to that call (seed 001, "waiting for a subtask on the same
queue"): the child runs in the parent's slot instead of waiting for one
its own parent holds. Along one chain of waiting callers at most
``limit`` slots are lent; one more level is `Deadlock`
(RECURSIVE_WAIT_DEADLOCK), raised at once instead of hanging. So with
concurrency 1, parent -> child runs and parent -> child -> grandchild is a
Deadlock; with concurrency 2 the three levels run. A lender lends to one
child at a time; a sibling waits for that slot (or any other) in line.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Iterator
from typing import Any

from .._base import public
from .._errors import Deadlock, WorkflowHalted
from .._observe import GateStats
from ._rates import RateBook, RateLimit


@dataclasses.dataclass(frozen=True, slots=True)
class Queue:
    """A named limit that several routines (or calls) share.

    ``@pool.routine(queue=db)`` or ``routine.options(queue=db)`` puts calls
    in it. At most ``concurrency`` of them run at once, per concurrency key
    (calls without a key share one); the rest wait in FIFO order. ``total``
    optionally caps the calls running across all keys, since per-key limits
    alone let the total grow with the number of keys.

    A call checks the queue's state against its own ``Queue`` object, so a
    call given ``Queue("db", concurrency=4)`` may start while calls limited
    to 2 wait: that is how a higher-priority call gets more room.

    Args:
        name: Identifies the queue; calls whose ``Queue`` has the same name
            share its slots.
        concurrency: Calls running at once per key (>= 1).
        total: Calls running at once across keys (>= 1), or None.
        rate: A `pool.RateLimit`: at most ``n`` starts per ``per`` seconds,
            per key (in this process for calls; across every process on the
            store for jobs), or None.
    """

    name: str
    concurrency: int = 1
    total: int | None = None
    rate: RateLimit | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"name: expected a non-empty str, got {self.name!r}")
        for field, value in (("concurrency", self.concurrency), ("total", self.total)):
            if value is None and field == "total":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{field}: expected an int >= 1, got {value!r}")
            if value < 1:
                raise ValueError(f"{field}: expected an int >= 1, got {value!r}")
        if self.rate is not None and not isinstance(self.rate, RateLimit):
            raise TypeError(f"rate: expected a pool.RateLimit or None, got {self.rate!r}")


class Ticket:
    """One call from admission to its end: what it holds, who called it.

    ``parent`` is the ticket of the call whose routine made this one (a
    nested call), so a wait can tell slots its own callers hold.
    """

    __slots__ = ("accepted_at", "admitted_at", "held", "parent", "seq", "task")

    def __init__(self, task: Any, parent: Ticket | None, admitted_at: float, seq: int = 0) -> None:
        self.task = task
        self.parent = parent
        self.admitted_at = admitted_at
        self.accepted_at = 0.0  # when a worker accepted it (monotonic), for metrics
        self.seq = seq  # arrival order at admission
        self.held: list[Gate] = []

    def callers(self) -> Iterator[Ticket]:
        """The chain of calls this one runs inside, innermost first."""
        ticket = self.parent
        while ticket is not None:
            yield ticket
            ticket = ticket.parent


class _Waiter:
    __slots__ = ("future", "limit", "ticket")

    def __init__(self, ticket: Ticket, limit: int, future: asyncio.Future[None]) -> None:
        self.ticket = ticket
        self.limit = limit
        self.future = future


class Gate:
    """Slots of one limit, granted in arrival order to whoever fits.

    Each waiter brings its own limit (its ``Queue``'s). A slot is granted to
    the earliest waiter with ``running < its limit``; among waiters with the
    same limit that is strict FIFO. After every change no waiter fits, so a
    newcomer that fits passes no one who could have gone first.

    ``holders`` hold slots of their own; ``borrowers`` run in a slot their
    caller (the lender) lent them while it waits for them.
    """

    __slots__ = ("_lending", "_limits", "_waiters", "borrowers", "holders", "key")

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = key
        self.holders: set[Ticket] = set()
        self.borrowers: dict[Ticket, Ticket] = {}  # borrower -> lender
        self._lending: dict[Ticket, Ticket] = {}  # lender -> borrower
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._limits: collections.Counter[int] = collections.Counter()

    @property
    def running(self) -> int:
        """Slots held now."""
        return len(self.holders)

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return len(self._waiters)

    def idle(self) -> bool:
        """No holder, borrower or waiter: the gate can be forgotten."""
        return not self.holders and not self.borrowers and not self._waiters

    def _lender(self, ticket: Ticket) -> tuple[Ticket | None, int]:
        """The nearest caller of ``ticket`` that runs in a slot here, and how many of its callers do."""
        nearest, count = None, 0
        for caller in ticket.callers():
            if caller in self.holders or caller in self.borrowers:
                count += 1
                nearest = nearest or caller
        return nearest, count

    async def acquire(self, ticket: Ticket, limit: int) -> None:
        """Take a slot for ``ticket`` (or borrow its caller's), waiting in line if none fits ``limit``.

        Raises:
            Deadlock: its caller chain already lent ``limit`` slots of this gate.
        """
        lender, lent = self._lender(ticket)
        if lender is not None:
            if lent > limit:
                raise Deadlock(
                    f"{ticket.task.name}() waits for {self.describe()}, whose slots are held by its own "
                    f"caller chain ({lent} deep), which waits for it: a limit of {limit} lends at most {limit} "
                    f"slot(s) along one chain, so it can never run (RECURSIVE_WAIT_DEADLOCK). Raise the "
                    f"limit, or use another queue/workflow for the nested call."
                )
            if lender not in self._lending:
                self._lend(lender, ticket)
                return
        if len(self.holders) < limit:
            self.holders.add(ticket)
            return
        waiter = _Waiter(ticket, limit, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._limits[limit] += 1
        try:
            await waiter.future
        except BaseException:
            if waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                self.release(ticket)  # granted as we were cancelled: hand it on
            else:
                self._forget(waiter)
            raise

    def release(self, ticket: Ticket) -> None:
        """Give back ``ticket``'s slot (or borrowed slot) and grant it to whoever fits next."""
        borrower = self._lending.pop(ticket, None)
        if borrower is not None:  # the lender ends first: its borrower keeps the slot as its own
            del self.borrowers[borrower]
            self.holders.discard(ticket)
            self.holders.add(borrower)
            return
        lender = self.borrowers.pop(ticket, None)
        if lender is not None:
            del self._lending[lender]
            self._relend(lender)
            return
        self.holders.discard(ticket)
        self._grant()

    def _lend(self, lender: Ticket, borrower: Ticket) -> None:
        self.borrowers[borrower] = lender
        self._lending[lender] = borrower

    def _relend(self, lender: Ticket) -> None:
        """The lender's slot is back: lend it to the first waiting call it is nearest caller of."""
        for waiter in self._waiters:
            if not waiter.future.done() and self._lender(waiter.ticket)[0] is lender:
                self._forget(waiter)
                self._lend(lender, waiter.ticket)
                waiter.future.set_result(None)
                return

    def fail_waiters(self, make_error: Any) -> None:
        """Fail every waiter with ``make_error(ticket)`` (a halted workflow)."""
        waiters, self._waiters = self._waiters, collections.deque()
        self._limits.clear()
        for waiter in waiters:
            if not waiter.future.done():
                waiter.future.set_exception(make_error(waiter.ticket))

    def describe(self) -> str:
        """Human-readable name of the limit."""
        kind, *rest = self.key
        if kind == "workflow":
            return f"workflow {rest[0]!r}"
        if kind == "total":
            return f"queue {rest[0]!r} (total)"
        return f"queue {rest[0]!r}" + (f" key {rest[1]!r}" if rest[1] else "")

    def _grant(self) -> None:
        while self._waiters and len(self.holders) < max(self._limits):
            for waiter in self._waiters:
                if waiter.future.done():  # cancelled, and not yet out of line
                    self._forget(waiter)
                    break
                if len(self.holders) < waiter.limit:
                    self._forget(waiter)
                    self.holders.add(waiter.ticket)
                    waiter.future.set_result(None)
                    break
            else:
                return

    def _forget(self, waiter: _Waiter) -> None:
        try:
            self._waiters.remove(waiter)
        except ValueError:
            return
        self._limits[waiter.limit] -= 1
        if not self._limits[waiter.limit]:
            del self._limits[waiter.limit]


class Limits:
    """All the gates of one pool, created on demand and dropped when idle."""

    def __init__(self) -> None:
        self._gates: dict[tuple[str, ...], Gate] = {}
        self._rates = RateBook()

    def __len__(self) -> int:
        return len(self._gates)

    async def acquire(self, ticket: Ticket) -> None:
        """Take every slot ``ticket``'s task needs, most specific first.

        Raises:
            Deadlock: a slot only the ticket's callers hold.
            WorkflowHalted: an earlier call of its workflow failed (halt_on_error).
        """
        gate: Gate | None = None
        try:
            for key, limit in self._needs(ticket.task):
                gate = self._gates.get(key)
                if gate is None:
                    gate = self._gates[key] = Gate(key)
                await gate.acquire(ticket, limit)
                ticket.held.append(gate)
                gate = None
            if ticket.task.rate is not None:  # last: a call waits for its turn holding its slots, as in line
                await self._rates.wait(ticket.task.queue, ticket.task.key, *ticket.task.rate)
        except BaseException:
            self.release(ticket)
            if gate is not None and gate.idle():
                self._gates.pop(gate.key, None)
            raise

    def try_acquire(self, ticket: Ticket) -> bool:
        """Take every slot ``ticket``'s task needs if all are free now (and nobody waits); else take none.

        For a job's dispatch attempt: a job that does not fit stays pending in
        the store instead of waiting in memory. A top-level call, so no slot is
        borrowed and no Deadlock is possible.
        """
        needs = self._needs(ticket.task)
        for key, limit in needs:
            gate = self._gates.get(key)
            if gate is not None and (gate.waiting or gate.running >= limit):
                return False
        for key, _ in needs:
            gate = self._gates.get(key)
            if gate is None:
                gate = self._gates[key] = Gate(key)
            gate.holders.add(ticket)
            ticket.held.append(gate)
        return True

    def release(self, ticket: Ticket, error: BaseException | None = None) -> None:
        """Give back what ``ticket`` holds; if it failed and asked to, halt its workflow."""
        held, ticket.held = ticket.held, []
        for gate in reversed(held):
            if error is not None and gate.key[0] == "workflow" and ticket.task.halt_on_error:
                gate.fail_waiters(lambda waiter, g=gate: _halted(waiter, g, ticket, error))
            gate.release(ticket)
        for gate in held:
            if gate.idle():
                self._gates.pop(gate.key, None)

    def stats(self) -> dict[str, GateStats]:
        """Running and waiting calls per live limit, by readable name."""
        return {gate.describe(): GateStats(gate.running, gate.waiting) for gate in self._gates.values()}

    @staticmethod
    def _needs(task: Any) -> list[tuple[tuple[str, ...], int]]:
        needs: list[tuple[tuple[str, ...], int]] = []
        if task.workflow:
            needs.append((("workflow", task.workflow), 1))
        if task.queue:
            needs.append((("queue", task.queue, task.key), task.concurrency))
            if task.total:
                needs.append((("total", task.queue), task.total))
        return needs


def _halted(waiter: Ticket, gate: Gate, failed: Ticket, error: BaseException) -> WorkflowHalted:
    why = f"{type(error).__name__}: {error}"
    halted = WorkflowHalted(
        f"{waiter.task.name}() did not run: {failed.task.name}() failed earlier in "
        f"{gate.describe()} with halt_on_error=True ({why})"
    )
    halted.__cause__ = error
    return halted


public(Queue)
