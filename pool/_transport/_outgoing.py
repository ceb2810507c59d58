"""A call this end opened on a `_session.Session`: its replies, in order, and how it ends.

Split from the session so each module keeps one job: the session routes
frames by call id; an `OutgoingCall` is what the caller awaits.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Final, Protocol

from .._errors import WorkerBroken, WorkerRejected
from ._proto import leakypool_pb2 as pb

SENT, QUEUED, STARTED = 0, 1, 2
"""An `OutgoingCall`'s ``state``: no answer yet; accepted to wait behind the callee's plain call; started."""

FINAL_OUTCOMES: Final[frozenset[int]] = frozenset(
    {pb.Outcome.RETURN, pb.Outcome.RAISE, pb.Outcome.STOP, pb.Outcome.CANCELLED}
)
"""Outcome kinds after which a call is over (YIELD is the only other)."""


class HandedBack(WorkerRejected):
    """A queued plain call came back from its worker, never started: it is placed again (its caller never sees this).

    Its worker handed it back (it retires, or the pool asked for it), or
    died before it began, its unix socket read to the end (`OutgoingCall.lost`).
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, "UNAVAILABLE")


class CallStream(Protocol):
    """What an `OutgoingCall` needs of its session."""

    label: str
    failure: BaseException | None

    @property
    def written(self) -> int:
        """Outgoing batches handed to the transport so far."""
        ...

    def step(self, call_id: int, kind: int, value: bytes = b"") -> None:
        """Send a Step for a call this end opened."""
        ...

    def forget(self, call_id: int) -> None:
        """Stop routing replies for ``call_id``."""
        ...


class OutgoingCall:
    """A call this end opened: its replies arrive here, in order.

    ``receive`` returns the next reply frame (Accept, Reject, Outcome) or
    raises the error that ended the stream. Only one task awaits a call at
    a time; the protocol is lock-step.
    """

    __slots__ = (
        "_inbox",
        "_on_finish",
        "_waiter",
        "answered",
        "batch",
        "cancelled_here",
        "final",
        "finished",
        "id",
        "name",
        "on_started",
        "plain",
        "recalled",
        "session",
        "state",
    )

    def __init__(self, session: CallStream, call_id: int, name: str, *, plain: bool = False) -> None:
        self.id: int = call_id
        self.session: CallStream = session
        self.name: str = name
        self.plain: bool = plain  # a plain function's: it begins only once its callee said so (Accept or Started)
        self.finished: bool = False
        self.final: pb.Frame | BaseException | None = None  # None: cancelled here, or not over
        self.cancelled_here: bool = False  # this end asked the callee to cancel it
        self.answered: bool = False  # the callee's first frame (Accept, Reject or an outcome) arrived
        self.batch: int = 0  # the number of the outgoing batch its Call frame is in
        self.state: int = SENT  # SENT, QUEUED or STARTED, as its callee said (`_session.Session.feed`)
        self.recalled: bool = False  # asked back while queued (`hand_back`)
        self.on_started: Callable[[], object] | None = None  # called once, when its callee says it began
        self._inbox: collections.deque[pb.Frame | BaseException] = collections.deque()
        self._waiter: asyncio.Future[pb.Frame | BaseException] | None = None
        self._on_finish: list[Callable[[OutgoingCall], None]] = []

    def on_finish(self, callback: Callable[[OutgoingCall], None]) -> None:
        """Run ``callback(self)`` once, when the call ends for any reason."""
        if self.finished:
            callback(self)
        else:
            self._on_finish.append(callback)

    @property
    def sent(self) -> bool:
        """Whether its Call frame was handed to the transport (the callee may have started it)."""
        return self.session.written >= self.batch

    def deliver(self, item: pb.Frame | BaseException, final: bool | None = None) -> None:
        """Hand a reply (or the stream's failure) to whoever awaits the call.

        ``final``: whether ``item`` ends the call, if the caller knows (else it is worked out here).
        """
        self.answered = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            self._waiter = None
            waiter.set_result(item)
        else:
            self._inbox.append(item)
        if final is None:
            final = isinstance(item, BaseException) or is_final(item)
        if final:
            if not self.finished:
                self.final = item
            self._finish()

    def reply(self, frame: pb.Frame) -> bool:
        """Take the callee's ``frame`` for this call (its session routes it here); True if the call is over."""
        body = frame.WhichOneof("body")
        if body == "started":
            self.state = STARTED  # not handed on: the caller waits for Accept and Outcome only
            if self.on_started is not None:
                self._began()
            return False
        if body == "accept":
            if not frame.accept.queued:
                self.state = STARTED
                if self.on_started is not None:
                    self._began()
            elif self.state < QUEUED:
                self.state = QUEUED
        elif body == "reject" and self.state:  # after an Accept: handed back (queued), else lost
            why = f"{self.session.label} handed {self.name}() back: {frame.reject.message}"
            self.deliver(HandedBack(why) if self.state == QUEUED else WorkerBroken(why))
            return True
        final = body == "reject" or (body == "outcome" and frame.outcome.kind in FINAL_OUTCOMES)  # (`is_final`)
        self.deliver(frame, final)
        return final

    def _began(self) -> None:
        began, self.on_started = self.on_started, None
        if began is not None:
            began()

    def lost(self, exc: BaseException, *, lossless: bool) -> None:
        """The stream ended with ``exc``: the call fails with it, or is `HandedBack` if it surely never began.

        ``lossless``: everything the callee wrote was read (a dead local worker's
        socket, read to its end). A plain call begins only after its callee put
        its Accept, or a Started, on the wire (`_worker._plain`): without either,
        it never began, and is placed again. Anything else may have run.
        """
        unstarted = lossless and self.plain and self.state != STARTED
        self.deliver(HandedBack(f"{exc} (never started)") if unstarted else exc)

    async def receive(self) -> pb.Frame:
        """The next reply frame. Raises what ended the stream, if it ended."""
        if self._inbox:
            item = self._inbox.popleft()
        else:
            self._waiter = asyncio.get_running_loop().create_future()
            item = await self._waiter
        if isinstance(item, BaseException):
            raise item
        return item

    def next_item(self) -> asyncio.Future[pb.Frame | BaseException]:
        """A future of the next reply frame, or of what ended the stream, as data (done at once if one is here).

        `receive` without a coroutine of its own: a caller that awaits it
        directly keeps its chain of frames one shorter on every reply.
        """
        waiter: asyncio.Future[pb.Frame | BaseException] = asyncio.get_running_loop().create_future()
        if self._inbox:
            waiter.set_result(self._inbox.popleft())
        else:
            self._waiter = waiter
        return waiter

    def put_back(self, item: pb.Frame | BaseException) -> None:
        """Make ``item``, just received, the next one `receive` returns again."""
        self._inbox.appendleft(item)

    def step(self, kind: int, value: bytes = b"") -> None:
        """Drive a generator call: NEXT, SEND(value), THROW(value), CLOSE."""
        self.session.step(self.id, kind, value)

    def hand_back(self) -> None:
        """Ask the callee for this call back, if it is still queued there (it answers with a Reject: `HandedBack`)."""
        if not self.finished and self.state == QUEUED and not self.recalled:
            self.recalled = True
            self.session.step(self.id, pb.Step.HAND_BACK)

    def cancel(self) -> None:
        """Ask the callee to cancel the call; forget it here at once."""
        if not self.finished:
            self.cancelled_here = True
            self.session.step(self.id, pb.Step.CANCEL)
            self.session.forget(self.id)
            self._finish()

    async def abort(self, timeout: float) -> None:
        """Cancel the call and wait (at most ``timeout`` s) until the callee confirms it ended.

        Waiting means that once a cancelled caller has finished unwinding,
        the remote task has stopped too (and no longer counts against the
        worker's backpressure), as with a local task. A callee that does not
        confirm in time (its routine ignores cancellation, or hogs the CPU)
        is forgotten; a second cancellation of the waiter stops the wait.
        """
        if self.finished:
            return
        self.cancelled_here = True
        self.session.step(self.id, pb.Step.CANCEL)
        try:
            async with asyncio.timeout(timeout):
                while not self.finished:
                    await self.receive()
        except (Exception, asyncio.CancelledError):  # noqa: BLE001, S110 - best-effort drain at close; the finally releases the call either way
            pass
        finally:
            if not self.finished:
                self.session.forget(self.id)
                self._finish()

    def _finish(self) -> None:
        if self.finished:
            return
        self.finished = True
        callbacks, self._on_finish = self._on_finish, []
        for callback in callbacks:
            callback(self)


def is_final(frame: pb.Frame) -> bool:
    """Whether ``frame`` ends its call (a Reject, or a final Outcome)."""
    body = frame.WhichOneof("body")
    return body == "reject" or (body == "outcome" and frame.outcome.kind in FINAL_OUTCOMES)
