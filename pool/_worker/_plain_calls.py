"""The worker service's side of plain calls: accepting them into the line, cancelling, handing back, their books.

    Call (plain, accepted) ──> Accept, or Accept(queued) owed ──> the line (`_plain.PlainLine`); its deadline armed
    an Accept owed QUEUED_ACCEPT_S ──> written by the loop (the thread had no message to that stream)
    Step CANCEL ───────────> still waiting: out of the line, CANCELLED; running: its result is dropped
    Step HAND_BACK ────────> still waiting: out of the line, Reject (handed back); started: nothing
    drain (retiring, Stop) ─> every call still waiting is handed back (it runs elsewhere, never here)
    deadline ──────────────> still waiting: never starts (TimeoutError); running: the worker exits
    the thread ended calls ─> `settle`: counted out (room, idle, limits), lazily or at once if `urgent`

The thread writes each call's outcome itself; what the loop still owes a
finished call is bookkeeping (`WorkerService.book`), done when the loop next
runs anyway (a message, State, the signals' tick) unless someone waits for
it now: a dispatcher owed a Room, a drain, metrics, a memory limit.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Final, Protocol

from .._transport import UNAVAILABLE
from ._admission import WorkerAdmission
from ._hosted import CANCELLED, Hosted, Outcome
from ._lifecycle import Lifecycle
from ._plain import QUEUE, START, PlainLine, timed_out
from ._recycle import report_retiring

_log = logging.getLogger("leakypool.worker")

QUEUED_ACCEPT_S: Final[float] = 0.005
"""How long a queued call's Accept may wait for the plain thread's next message to its stream; then the loop sends it.

Until its Accept arrives the pool counts the call as sent, not queued, so
it cannot ask for it back for an idle worker: a few milliseconds late.
"""

HANDED_BACK: Final[str] = "handed back"
"""What a Reject that hands a queued call back says first (the dispatcher knows it by the call's state)."""


class Books(Protocol):
    """What the plain side needs of the `WorkerService`."""

    def finish(self, hosted: Hosted, outcome: Outcome) -> None:
        """Answer ``hosted`` with ``outcome`` and count it out."""
        ...

    def book(self, hosted: Hosted, kind: int | None, ended: float | None = None) -> None:
        """Count ``hosted`` out (its answer was written elsewhere); ``kind`` None: it never ran."""
        ...

    def line_freed(self) -> None:
        """The plain thread let go of a call counted out before (cancelled while it ran): tell whom it turned away."""
        ...


class PlainCalls:
    """A worker's plain calls, as its loop handles them (the thread's side is `PlainLine`).

    Args:
        depth: Calls that may wait behind the running one (``--plain-prefetch``).
        books: The service.
        admission: Its counts (the line's queued calls are left out of backpressure).
        lifecycle: Its task limit and drain.
        urgent: Whether the loop must hear of a finished call at once (see `PlainLine`).
    """

    def __init__(
        self,
        depth: int,
        books: Books,
        admission: WorkerAdmission,
        lifecycle: Lifecycle,
        urgent: Callable[[], bool],
    ) -> None:
        self._books = books
        self._lifecycle = lifecycle
        self._loop: asyncio.AbstractEventLoop | None = None
        self._backstop: asyncio.TimerHandle | None = None  # pays the Accepts owed too long (`_pay_late`)
        self.line = PlainLine(depth, urgent, self._wake, budget=lifecycle.take)
        admission.line = self.line
        lifecycle.on_drain(self.hand_back_all)

    def start(self) -> None:
        """Note the loop the books live on (call on it)."""
        self._loop = asyncio.get_running_loop()

    def _wake(self) -> None:
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self.settle)
            except RuntimeError:  # the loop closed: the worker is exiting
                pass

    def room(self, hosted: Hosted) -> bool:
        """Whether ``hosted`` can go in line now (and count against the task limit if it starts at once)."""
        where = self.line.room(hosted.task)
        if where is None:
            return False
        hosted.queued = where == QUEUE
        hosted.counted = where == START
        return where == QUEUE or self._lifecycle.take()

    def accept(self, hosted: Hosted) -> None:
        """``hosted`` was accepted (see `room`): answer Accept, arm its deadline, put it in line.

        A call that may begin at once waits in line until the end of the loop's turn, once the
        turn's frames, its Accept among them, were written in one write (`_start`). A queued
        call's Accept is owed: the thread's next message to its stream carries it, ahead of
        the call's Started; one owed `QUEUED_ACCEPT_S` is written here (`_pay_late`).
        """
        session = hosted.session
        owed = hosted.queued and session.failure is None
        loop = asyncio.get_running_loop()
        if not owed:
            session.accept(hosted.id, queued=hosted.queued)
        elif self._backstop is None:
            self._backstop = loop.call_later(QUEUED_ACCEPT_S, self._pay_late)
        timeout = hosted.task.timeout
        if timeout:
            hosted.deadline = time.monotonic() + timeout  # counted from its arrival: the caller's time left
            hosted.timer = loop.call_later(timeout, self._expire, hosted, timeout)
        if not hosted.queued:
            hosted.pending = True  # first in line, but the thread waits for `_start`
            loop.call_soon(self._start, hosted)  # after the outbox's flush of this turn, scheduled by the Accept
        self.line.add(hosted, owed=owed)

    def pay(self, before: float = math.inf) -> None:
        """Write the Accepts still owed (those owed since before ``before``), as the loop's own frames."""
        for hosted in self.line.owed(before=before):
            if not (hosted.settled or hosted.cancelled):
                hosted.session.accept(hosted.id, queued=True)

    def _pay_late(self) -> None:
        self._backstop = None
        self.pay(before=time.monotonic() - QUEUED_ACCEPT_S)
        since = self.line.owed_since
        if since is not None and self._loop is not None:
            delay = max(0.0, since + QUEUED_ACCEPT_S - time.monotonic())
            self._backstop = self._loop.call_later(delay, self._pay_late)

    def _start(self, hosted: Hosted) -> None:
        """The turn's write is done: it may begin; if its Accept is not in the kernel yet, after a Started."""
        self.line.release(hosted, landing=not hosted.session.accepted_on_wire())

    def cancel(self, hosted: Hosted) -> None:
        """Its caller left: one still waiting never starts; a running one's result is dropped. Answered CANCELLED."""
        self.line.take_back(hosted)
        hosted.cancelled = True
        if not hosted.settled:
            self._books.finish(hosted, CANCELLED)

    def hand_back(self, hosted: Hosted, why: str) -> bool:
        """Give ``hosted`` back to its dispatcher if it has not started (a Reject); True if it had not."""
        if hosted.settled or not hosted.queued or not self.line.take_back(hosted):
            return False
        hosted.session.reject(hosted.id, UNAVAILABLE, f"{HANDED_BACK}: {why}")
        self._books.book(hosted, None)
        return True

    def hand_back_all(self) -> None:
        """The worker stops accepting: every call still waiting goes back to its dispatcher (on drain)."""
        self.settle()
        self.pay()  # their Accepts first: each is then handed back, not turned away (one the thread is writing may
        # come after its Reject: the pool then takes it as turned away, and places it again all the same)
        for hosted in self.line.take_all_back():
            if not hosted.settled:
                hosted.session.reject(hosted.id, UNAVAILABLE, f"{HANDED_BACK}: the worker is leaving")
                self._books.book(hosted, None)

    def settle(self) -> None:
        """Count out the calls that ended on the thread (their outcomes are written already)."""
        if not self.line.used:
            return  # no plain call yet: nothing ended there, nothing was counted there (the async path's cost)
        for hosted, outcome, ended in self.line.settle():
            if ended is None:  # its outcome carries large buffers: written here, where they cross
                if not (hosted.settled or hosted.cancelled):
                    self._books.finish(hosted, outcome)
            elif not hosted.settled:
                self._books.book(hosted, outcome[0], ended)
            else:
                self._books.line_freed()
        self._lifecycle.counted()  # the thread may have started the last call of the task limit

    def _expire(self, hosted: Hosted, timeout: float) -> None:
        hosted.timer = None
        if hosted.settled:
            return
        if self.line.take_back(hosted):  # still waiting at its deadline: it never starts
            self._books.finish(hosted, timed_out(hosted, timeout, started=False))
        elif self.line.running is hosted:
            self._overdue(hosted, timeout)

    def _overdue(self, hosted: Hosted, timeout: float) -> None:
        """``hosted`` runs past its hard timeout: answer for it, hand back what waits behind it, exit on purpose."""
        _log.warning(
            "%s() ran past its timeout of %gs; this worker exits (a plain call cannot be interrupted)",
            hosted.task.name,
            timeout,
        )
        report_retiring("timeout")  # the pool replaces this worker at once (no crash back-off)
        self._lifecycle.retired("timeout")
        if hosted.session.failure is None and not hosted.cancelled:
            self._books.finish(hosted, timed_out(hosted, timeout))
        hosted.cancelled = True
        self._lifecycle.drain(f"a plain call to {hosted.task.name}() ran past its timeout of {timeout:g}s", 0.0)

    def stop(self) -> None:
        """Let the thread end (a call still running there does not hold up the exit: it is a daemon)."""
        if self._backstop is not None:
            self._backstop.cancel()
            self._backstop = None
        self.line.stop()
