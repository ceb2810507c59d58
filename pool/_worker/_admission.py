"""A worker's admission: who may start now, and whom to tell when room frees. No I/O.

    Call ──> decide(task) ──> ACCEPT          count it in flight (`admit`)
                          ├─> BUSY            the hook said no, or a plain call with no room in the
                          │                   plain line (`_plain`): Reject(RESOURCE_EXHAUSTED),
                          │                   remember the session to tell "room" later
                          ├─> DRAINING        Reject(UNAVAILABLE)
                          ├─> HOOK_FAILED     the hook raised: Reject(UNAVAILABLE), logged
                          └─> an awaitable    an async hook: the service awaits it, then `settle`

    finish ──> release() ──> the sessions turned away since the last room: send each a Room frame
    sample ──> idle_room() ──> the same, when nothing counts against the hook any more (its
                               reason was memory, latency ...: it may have changed with nothing ending)

The service does the I/O (frames, logs, the awaiting); this object only
counts and decides, so every threshold is testable without a loop or a
socket (as httpcore's `_assign_requests_to_connections` decides and its
caller acts).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable
from collections.abc import Set as AbstractSet
from typing import Any, Final

from backpressure import BackpressureContext, BackpressureLike

from .._transport import RESOURCE_EXHAUSTED, UNAVAILABLE
from ._plain import QUEUE
from ._signals import ResourceSignals

_NOBODY: Final[frozenset[Any]] = frozenset()
"""What `release` returns when nobody was turned away."""


class Verdict(enum.Enum):
    """What the worker answers a Call; ``code`` and ``message`` go into the Reject frame."""

    ACCEPT = (0, "")
    BUSY = (RESOURCE_EXHAUSTED, "rejected by backpressure")
    DRAINING = (UNAVAILABLE, "worker is draining")
    HOOK_FAILED = (UNAVAILABLE, "backpressure hook failed; see the worker's log")

    @property
    def code(self) -> int:
        """The gRPC status code of a rejection."""
        return self.value[0]

    @property
    def message(self) -> str:
        """The text of a rejection."""
        return self.value[1]


HOOK_ERRORS: Final[tuple[type[BaseException], ...]] = (Exception,)
"""What a failing hook may raise and still be answered (cancellation always propagates)."""


class WorkerAdmission:
    """Counts a worker's calls and runs its backpressure hook.

    Args:
        hook: The backpressure hook (True rejects); None accepts everything.
        signals: The worker's resource readings, passed to the hook
            (memory, loop lag, recent durations); None passes only the count.
        hold_slots: Count a task parked on a nested call against the hook.
            Off, a waiting task frees its slot until the nested call
            returns, so routines that call routines cannot deadlock a pool
            of workers capped at one task each.
    """

    def __init__(
        self, hook: BackpressureLike | None, *, hold_slots: bool = False, signals: ResourceSignals | None = None
    ) -> None:
        self.hook = hook
        self.signals = signals
        self.hold_slots = hold_slots
        self.accepting = True
        self.in_flight = 0
        self.parked = 0
        self.vetting = 0  # calls an async hook is still deciding on
        self.hook_error: BaseException | None = None  # what the hook raised last, for the log
        self._turned_away: set[Any] = set()
        self.line: Any = None  # the plain line (`_plain.PlainLine`): its waiting calls do not count, its room decides

    @property
    def owed_room(self) -> bool:
        """Whether a session turned away waits for a Room frame."""
        return bool(self._turned_away)

    def active(self) -> int:
        """Tasks that count against backpressure: in flight, less plain calls waiting in line and those parked.

        A plain call accepted behind the running one (`_plain`) uses nothing
        yet: it counts once it starts.
        """
        waiting = self.line.queued if self.line is not None else 0
        return max(0, self.in_flight - waiting - (0 if self.hold_slots else self.parked))

    def decide(self, task: Any) -> Verdict | Awaitable[Any]:
        """The verdict on a new call, or the awaitable an async hook returned (then `settle` it).

        A call being vetted counts like a running one, so a burst cannot
        slip past an async hook while it decides.
        """
        if not self.accepting:
            return Verdict.DRAINING
        behind = 0
        if self.line is not None and getattr(task, "plain", False):
            where = self.line.room(task)
            if where is None:
                return Verdict.BUSY  # the plain thread busy and its line full: the call waits at the dispatcher
            behind = 1 if where is QUEUE else 0  # it starts once the running plain call ends: judged as if it had
        if self.hook is None:
            return Verdict.ACCEPT
        try:
            verdict = self.hook(self._context(task, behind))
        except HOOK_ERRORS as exc:
            self.hook_error = exc
            return Verdict.HOOK_FAILED
        if inspect.isawaitable(verdict):
            self.vetting += 1
            return verdict
        return Verdict.BUSY if verdict else Verdict.ACCEPT

    def _context(self, task: Any, behind: int = 0) -> BackpressureContext:
        active = max(0, self.active() + self.vetting - behind)
        signals = self.signals
        if signals is None:
            return BackpressureContext(active, task)
        return BackpressureContext(
            active, task, signals.memory_fraction, signals.memory_bytes, signals.loop_lag_s, signals.recent()
        )

    def settle(self, rejected: object, error: BaseException | None = None) -> Verdict:
        """The verdict once an async hook answered ``rejected`` (or raised ``error``)."""
        self.vetting -= 1
        if error is not None:
            self.hook_error = error
            return Verdict.HOOK_FAILED
        if not self.accepting:
            return Verdict.DRAINING
        return Verdict.BUSY if rejected else Verdict.ACCEPT

    def turned_away(self, session: Any) -> None:
        """``session`` got BUSY: it is told "room" at the next `release`."""
        self._turned_away.add(session)

    def admit(self) -> bool:
        """An accepted call starts; True if the worker was idle until now."""
        self.in_flight += 1
        return self.in_flight == 1

    def release(self) -> AbstractSet[Any]:
        """A call ended; returns the sessions to tell there is room now (most often none: no set is made)."""
        self.in_flight -= 1
        return self._room() if self._turned_away else _NOBODY

    def room_now(self) -> set[Any]:
        """The sessions turned away since the last room, to tell now (a plain call left the thread)."""
        return self._room()

    def park(self) -> set[Any]:
        """A task starts waiting on a nested call; returns whom to tell "room" (unless slots are held)."""
        self.parked += 1
        return set() if self.hold_slots else self._room()

    def unpark(self) -> None:
        """A task's nested call returned: it counts again."""
        self.parked -= 1

    def idle_room(self) -> set[Any]:
        """On a resource sample: the sessions to tell "room" if nothing runs that could end and tell them."""
        if not self._turned_away or self.active() or self.vetting:
            return set()
        return self._room()

    def _room(self) -> set[Any]:
        sessions, self._turned_away = self._turned_away, set()
        return sessions

    def __repr__(self) -> str:
        return (
            f"<WorkerAdmission {'accepting' if self.accepting else 'draining'} "
            f"[{self.in_flight} in flight, {self.parked} parked, {self.vetting} vetting"
            f"{f', {self.line.queued} plain waiting' if self.line is not None and self.line.queued else ''}]>"
        )
