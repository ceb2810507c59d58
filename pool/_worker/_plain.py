"""Plain ``def`` routines: the worker's line of them, run one at a time on a thread of their own.

    Call (plain) ──> `room`: the thread idle? ──────────── START: Accept, the thread starts it at once
         │             busy, fewer than ``depth`` waiting ── QUEUE: Accept(queued) owed, it waits in the line
         │             else (or the call's prefetch=0) ───── BUSY: Reject (transient; the pool places it elsewhere)
         v
    the plain thread: take the next call ──> Started on the wire (a queued one, or one whose Accept had
                                             not reached the kernel), with the last outcome and
                                             the Accepts owed on that stream
                      run it (unpickle, call, pickle) ──> its outcome, straight to the socket
                      ...the next call in line at once: no round trip to the pool, nor to the loop

A plain function cannot be interrupted, so it runs on a daemon thread of
its own: the worker's loop stays free to accept, reject and answer State
(Python hands the GIL over every switch interval). The thread writes its
frames itself (`_session.Session.write_from_thread`: over a unix socket,
straight to it), so the call after a finished one starts with no hop to the
loop, the way a `ProcessPoolExecutor` worker reads the next item from its
pipe. The thread alone starts a queued call, under the line's lock: once it
has taken it, a handback (`hand_back`, `hand_back_all`) finds it gone. It
writes the call's Started before it begins, and over a unix socket that is
on the wire when the call begins (``os.write`` returned), so a pool that
reads a dead worker's socket to its end knows which calls never started. A
queued call's Accept is owed (`add`, `owed`): it leads the thread's next
message to that stream (as an Accept to start at once, if the call starts
then), so a worker busy with short calls sends one message per call, not
two; the loop sends what is still owed after a few milliseconds
(`_plain_calls.QUEUED_ACCEPT_S`). A
call that starts at once waits in line, first and ``pending``, until the
loop's turn wrote its Accept (`_plain_calls.PlainCalls._start`); if that did
not reach the kernel, the thread writes its Started too. The loop learns of finished calls
lazily (`settle`: on the next message, State, or the signals' tick), or at
once when someone waits for it (``urgent``).

A call with a timeout gets a hard limit: its deadline runs from its arrival
(the caller's time left); past it a queued call never starts, and a running
one makes the worker answer `TimeoutError` and exit (`WorkerService._overdue`).
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from .._transport import buffers, wire
from .._transport import leakypool_pb2 as pb
from . import _trace
from ._hosted import Hosted, Outcome

_log = logging.getLogger("leakypool.worker")


class Place(enum.Enum):
    """Where a new plain call goes (`PlainLine.room`)."""

    START = "start"  # the thread is idle: it starts the call at once
    QUEUE = "queue"  # behind the running call, in the line: its Accept says "queued"


START: Final = Place.START
QUEUE: Final = Place.QUEUE

NOT_STARTED: Outcome = (pb.Outcome.CANCELLED, b"", "")
"""What a call the thread gave up before starting it reports (its Started could not be written)."""


class PlainLine:
    """The worker's plain calls: the one on the plain thread, and up to ``depth`` accepted behind it.

    The loop adds and takes calls back; the thread takes the next one and
    runs it. Both hold ``lock`` to touch the line.

    Args:
        depth: Calls that may wait behind the running one (the worker's plain prefetch).
        urgent: Called on the plain thread after a call ends; True if the loop must hear of it now.
        wake: Runs a callback on the loop (to `settle` at once).
        budget: Takes one call off the worker's task limit (`Recycler.take`); False: none left.
    """

    def __init__(
        self,
        depth: int,
        urgent: Callable[[], bool],
        wake: Callable[[], None],
        budget: Callable[[], bool] | None = None,
    ) -> None:
        self.depth = depth
        self.lock = threading.Condition()
        self.running: Hosted | None = None
        self.waiting: collections.deque[Hosted] = collections.deque()
        self.budget = budget
        self._urgent = urgent
        self._wake = wake
        # Ended on the thread, not yet in the loop's books: (call, outcome, when it ended, or None: its outcome
        # carries large buffers and is written on the loop, where they cross).
        self._done: list[tuple[Hosted, Outcome, float | None]] = []
        self._owed: list[tuple[Hosted, float]] = []  # queued calls whose Accept has not left, and since when
        self._held = False  # the next call may not start: the worker's task limit is reached
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="leakypool-plain", daemon=True)
        self.used = False  # whether this line ever took a call (a worker of ``async def`` routines only: never)

    # -- the loop's side -------------------------------------------------------------------------------

    def room(self, task: Any) -> Place | None:
        """Where a new plain call would go: `START`, `QUEUE`, or None (no room: BUSY)."""
        with self.lock:  # (the thread moves a call from waiting to running under it)
            taken = len(self.waiting) + (self.running is not None)
        if not taken:
            return START  # (only the loop adds calls: an idle line stays idle until it does)
        if getattr(task, "prefetch", None) == 0 or taken > self.depth:
            return None
        return QUEUE

    def add(self, hosted: Hosted, *, owed: bool = False) -> None:
        """Put an accepted call in line (``hosted.queued`` says whether its Accept said queued).

        ``owed``: its Accept(queued) was not written; the thread writes it with its next message
        to the call's stream, before the call's Started, unless the loop takes it first (`owed`).
        """
        if not self.used:
            self.used = True
            self._thread.start()
        with self.lock:
            self.waiting.append(hosted)
            if owed:
                self._owed.append((hosted, time.monotonic()))
            self.lock.notify()

    def owed(self, session: object | None = None, before: float = math.inf) -> list[Hosted]:
        """Take the calls whose Accept is owed: on ``session`` (None: any), and owed since before ``before``."""
        if not self._owed:
            return []  # (read without the lock: one the loop adds now is the next look's)
        with self.lock:
            keep: list[tuple[Hosted, float]] = []
            taken: list[Hosted] = []
            for entry in self._owed:
                if (session is None or entry[0].session is session) and entry[1] <= before:
                    taken.append(entry[0])
                else:
                    keep.append(entry)
            self._owed = keep
        return taken

    @property
    def owed_since(self) -> float | None:
        """Since when the oldest Accept still owed is (monotonic); None if none is."""
        owed = self._owed
        return owed[0][1] if owed else None

    def release(self, hosted: Hosted, *, landing: bool) -> None:
        """Let ``hosted`` (``pending``: its Accept was being written) begin; ``landing``: after a Started."""
        with self.lock:
            hosted.landing, hosted.pending = landing, False
            self.lock.notify()

    def take_back(self, hosted: Hosted) -> bool:
        """Take ``hosted`` out of the line if it has not started; True if it was still waiting.

        An Accept it was owed is dropped: the loop's answer is then its first. The pool takes an
        outcome (cancelled, timed out) as one that overtook its Accept, and a Reject as a call
        turned away, which it places again as it would one handed back.
        """
        with self.lock:
            try:
                self.waiting.remove(hosted)
            except ValueError:
                return False
            if self._owed:
                self._owed = [entry for entry in self._owed if entry[0] is not hosted]
            return True

    def take_all_back(self) -> list[Hosted]:
        """Take every queued call (its Accept said queued) that has not started out of the line (the worker retires).

        A call accepted to start at once stays: it was counted, and its
        dispatcher was told it runs.
        """
        with self.lock:
            taken = [hosted for hosted in self.waiting if hosted.queued]
            for hosted in taken:
                self.waiting.remove(hosted)
            return taken

    def settle(self) -> list[tuple[Hosted, Outcome, float | None]]:
        """The calls that ended on the thread since the last look: (call, outcome, when it ended, or None: its
        outcome is still to write, on the loop)."""
        if not self._done:
            return []  # (read without the lock: one the thread adds now is the next look's)
        with self.lock:
            done, self._done = self._done, []
        return done

    @property
    def queued(self) -> int:
        """Calls accepted and waiting (not counted against backpressure)."""
        return len(self.waiting)

    def stop(self) -> None:
        """Let the thread end once its current call returns (a daemon: nothing waits for it)."""
        with self.lock:
            self._stopping = True
            self.lock.notify_all()

    # -- the plain thread --------------------------------------------------------------------------------

    def _take(self, block: bool) -> tuple[Hosted, bool] | None:
        """The next call to start, and whether its deadline passed (it is answered, not started); None: none now."""
        with self.lock:
            while not self._stopping:
                if self.waiting and not self._held and not self.waiting[0].pending:
                    hosted = self.waiting[0]
                    expired = hosted.deadline is not None and time.monotonic() >= hosted.deadline
                    if not (expired or hosted.counted or self.budget is None or self.budget()):
                        self._held = True  # the task limit is reached: the loop retires and hands these back
                        self._wake()
                        continue
                    self.waiting.popleft()
                    hosted.counted = True
                    self.running = hosted
                    return hosted, expired
                if not block:
                    return None
                self.lock.wait()
            return None

    def _run(self) -> None:
        last: tuple[Hosted, Outcome] | None = None  # the last call's outcome, not yet written
        while True:
            taken = self._take(block=last is None)
            if taken is None:
                if last is None:
                    return  # stopping
                self._send(last, None)
                last = None
                continue
            hosted, expired = taken
            if not self._send(last, hosted, start=not expired):
                self._ended(hosted, NOT_STARTED)  # its Started could not leave: it never starts
                last = None
                continue
            last = (hosted, timed_out(hosted, 0.0, started=False) if expired else self._call(hosted))
            with self.lock:
                self.running = None  # the line has room before its outcome leaves: the next call, sent
                # as the dispatcher reads it, finds the place its outcome freed

    def _send(self, last: tuple[Hosted, Outcome] | None, starting: Hosted | None, start: bool = True) -> bool:
        """Write ``last``'s outcome and, before ``starting`` begins, its Started; False if the Started could not leave.

        The Accepts owed on a stream go first in the message written to it.
        ``starting``'s own, if owed, goes as an Accept to start at once: it
        needs no Started then (the pool never sees it queued).
        """
        frames = pb.Frames()
        land = starting is not None and (starting.queued or starting.landing) and start
        together: tuple[Hosted, Outcome] | None = None  # last's outcome, if it goes in ``frames``
        if last is not None:
            hosted, outcome = last
            if hosted.cancelled:
                pass  # its caller left: the loop answered for it
            elif outcome[1][:1] == bytes([buffers.MARK]):
                self._ended(hosted, outcome, via_loop=True)  # large buffers cross on the loop (`Session.carry`)
                last = None
            elif starting is None or hosted.session is not starting.session:
                alone = pb.Frames()
                self._add_owed(alone, hosted.session)
                _add_outcome(alone, hosted, outcome)
                hosted.session.write_from_thread(alone)
            else:
                together = (hosted, outcome)
        own = False  # starting's own Accept went in ``frames``
        if land or together is not None:  # (starting is set in both cases)
            own = self._add_owed(frames, starting.session, starting if land else None)  # type: ignore[union-attr]
        if together is not None:
            _add_outcome(frames, *together)
        if land and not own:
            frame = frames.frames.add()
            frame.id = starting.id  # type: ignore[union-attr]  # set when land is
            frame.started.SetInParent()
        landed = True
        if frames.frames:
            session = (starting or last[0]).session  # type: ignore[index]  # one of them is set
            landed = session.write_from_thread(frames, land=land)
        if last is not None:
            self._ended(*last)
        return landed

    def _add_owed(self, frames: pb.Frames, session: object, starting: Hosted | None = None) -> bool:
        """Add the Accepts owed on ``session`` to ``frames``, about to be written to it; True if ``starting``'s was one.

        ``starting``'s goes as an Accept to start (it begins once this message is in the kernel).
        """
        own = False
        for hosted in self.owed(session):
            if hosted.cancelled or hosted.settled:
                continue
            frame = frames.frames.add()
            frame.id = hosted.id
            if hosted is starting:
                frame.accept.SetInParent()
                own = True
            else:
                frame.accept.queued = True
        return own

    def _call(self, hosted: Hosted) -> Outcome:
        traced = _trace.start(hosted.task)  # None unless this process traces (OpenTelemetry)
        outcome = call_plain(hosted)
        if traced is not None:
            _trace.end(traced, outcome[0], outcome[2])
        return outcome

    def _ended(self, hosted: Hosted, outcome: Outcome, *, via_loop: bool = False) -> None:
        with self.lock:
            if self.running is hosted:
                self.running = None  # (one that never started)
            self._done.append((hosted, outcome, None if via_loop else time.monotonic()))
            if via_loop or self._urgent():
                self._wake()


def _add_outcome(frames: pb.Frames, hosted: Hosted, outcome: Outcome) -> None:
    frame = frames.frames.add()
    frame.id = hosted.id
    body = frame.outcome
    body.SetInParent()
    body.kind = outcome[0]
    if outcome[1]:
        body.value = outcome[1]
    if outcome[2]:
        body.traceback = outcome[2]


def call_plain(hosted: Hosted) -> Outcome:
    """A plain routine's whole run, on the plain thread: unpickle, call, pickle; its outcome."""
    name = hosted.task.name
    try:
        fn = hosted.code.resolve()
        args, kwargs = wire.unpack_args(hosted.task.args, name)
        value = fn(*args, **kwargs)
        return (pb.Outcome.RETURN, wire.dumps(value, what=f"the result of {name}()", oob=True), "")
    except BaseException as exc:  # noqa: BLE001 - user code: any exception is the routine's outcome
        return (pb.Outcome.RAISE, *wire.pack_exception(exc, name))


def timed_out(hosted: Hosted, timeout: float, *, started: bool = True) -> Outcome:
    """The outcome of a plain call past its deadline: the caller's `TimeoutError` (it ran, or never started)."""
    name = hosted.task.name
    if started:
        error = TimeoutError(f"{name}() ran past its timeout of {timeout:g}s; the worker running it exits")
    else:
        error = TimeoutError(f"{name}() reached its deadline while it waited in a worker; it never started")
    return (pb.Outcome.RAISE, *wire.pack_exception(error, name))
