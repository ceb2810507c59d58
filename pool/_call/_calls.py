"""The caller's side of a routine call, whoever dispatches it.

A call is described by a `CallRecord`. A `Dispatcher` turns a task into an
accepted `OutgoingCall` on some stream: the `WorkerPool` (through its
admission, limits and balancer) or, inside a worker, the stream back to
the dispatcher (nested dispatch). This module then runs the call to its end:

    Routine(...)  ->  CallRecord  ->  dispatcher.dispatch(task)  ->  OutgoingCall
                                                            -> call_routine: one outcome
                                                            -> RemoteGenerator: a stream

and maps outcomes back to values and exceptions (`outcome_result`, the one
decoder), so that a remote call behaves like a local one: same return
value, same exception type (with the worker's traceback as its cause),
cancellation crossing to the worker.

Transience is a type: a worker that says "not now" raises `WorkerRejected`
(the pool keeps it), one that failed for good raises `WorkerBroken` (the
pool evicts it). The gRPC code on either is information only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sys
import time
from typing import Any, Final

from .._errors import SerializationError, WorkerBroken, WorkerRejected
from .._transport import LATE_MESSAGE, TRANSIENT_CODES, HandedBack, OutgoingCall, Session, buffers, status_name, wire
from .._transport import leakypool_pb2 as pb
from ._dispatcher import Dispatches
from ._task import CallRecord


def start_call(session: Session, task: CallRecord) -> OutgoingCall:
    """Open a call for ``task`` on ``session`` now, without waiting for the callee's answer (`judge_first` reads it).

    A call that is not plain is watched (`AnswerWatch`): a callee that says
    nothing for `ACCEPT_TIMEOUT_S` (a host gone dark, a stopped process) is
    treated as busy, so the pool moves on. An unanswered plain call waits: a
    worker that may yet start it must not see it again elsewhere.

    Raises:
        BaseException: the error that already ended the stream.
    """
    call, message = session.open(task.name, plain=task.plain)
    task.fill(message, session)
    if task.started is not None:
        call.on_started = task.started
    if not task.plain:
        watch = session.watch
        if watch is None:
            watch = session.watch = AnswerWatch(session)
        watch.add(call, buffers.size(task.args))  # type: ignore[attr-defined]  # a session's watch is always an AnswerWatch
    return call


async def open_call(session: Session, task: CallRecord) -> OutgoingCall:
    """Open a call for ``task`` on ``session`` and wait for the callee's verdict (`start_call`, then `judge_first`).

    Raises:
        WorkerRejected: the callee declined it (busy or draining), or did not
            answer in time (DEADLINE_EXCEEDED).
        WorkerBroken: the callee refused it for good (a protocol error).
        BaseException: what ended the stream, if it ended first.
    """
    call = start_call(session, task)
    try:
        item = await call.next_item()
    except BaseException:  # cancelled before the verdict: the callee may have started it already
        call.cancel()
        raise
    judge_first(call, item, task.name)
    return call


def judge_first(call: OutgoingCall, item: pb.Frame | BaseException, name: str) -> None:
    """What the first answer to a call just sent means: return if the worker took it, raise if it did not.

    An outcome that overtook its Accept is put back for the caller to read,
    and so is the end of a stream the call had already left on with a
    transient code: the worker may have started it (it starts routines at
    once, before their Accept leaves), so the call counts as accepted and
    then lost (`WorkerBroken` for its caller), never run twice. The same end
    before the call left is an unreachable worker (`WorkerRejected`).

    Raises:
        StartByPassed: a job's call arrived after its start-by time.
        WorkerRejected: it declined (busy, draining), or was unreachable.
        WorkerBroken: it refused for good (a protocol error), or a stream failure.
        BaseException: what ended the stream otherwise.
    """
    if isinstance(item, BaseException):
        session = call.session
        if isinstance(item, WorkerBroken) and item.code in TRANSIENT_CODES and item is session.failure:
            if call.sent:
                call.put_back(item)
                return
            call.cancel()
            raise WorkerRejected(str(item), item.code) from item
        call.cancel()
        raise item
    if item.HasField("reject"):
        if item.reject.message.startswith(LATE_MESSAGE):
            raise StartByPassed(f"{call.session.label} declined {name}(): {item.reject.message}")
        raise rejection(item.reject, call.session.label, name)
    if not item.HasField("accept"):
        call.put_back(item)  # its outcome overtook its Accept (a worker's plain thread writes its own)


class AnswerWatch:
    """Times out the calls of one stream that got no answer within `ACCEPT_TIMEOUT_S`: one timer, not one per call.

    Calls are watched in the order they were opened, so their deadlines come
    in order too: the timer is set for the oldest unanswered call, and a call
    answered in time costs an append and, later, a pop.

    The window times the worker, not the wire (issue 34): it runs from the
    later of a call's opening and the last moment a message was seen
    mid-transfer on the stream (`Session.busy_at`), so a call whose frame
    (or one ahead of it, or the reply carrying its Accept) takes longer than
    the window to write or read is never taken for a worker that did not
    answer. A worker that stopped reading or writing moves no bytes, and
    its window runs out as before. A call with large arguments also gets
    time for the worker to take them in once they arrived (`INTAKE_BYTES_PER_S`).
    """

    __slots__ = ("_calls", "_session", "_timer")

    def __init__(self, session: Session) -> None:
        self._session = session
        self._calls: collections.deque[tuple[float, float, OutgoingCall]] = (
            collections.deque()
        )  # (deadline, window, call)
        self._timer: asyncio.TimerHandle | None = None

    def add(self, call: OutgoingCall, size: int = 0) -> None:
        """Watch ``call``, just opened, whose frame carries ``size`` bytes of arguments."""
        calls = self._calls
        while calls and (calls[0][2].answered or calls[0][2].finished):
            calls.popleft()
        loop = asyncio.get_running_loop()
        window = ACCEPT_TIMEOUT_S + size / INTAKE_BYTES_PER_S if size >= INTAKE_FREE_BYTES else ACCEPT_TIMEOUT_S
        deadline = loop.time() + window
        calls.append((deadline, window, call))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._check)

    def close(self) -> None:
        """The session is over (its calls got its failure): drop the timer and the calls."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._calls.clear()

    def _check(self) -> None:
        self._timer = None
        calls = self._calls
        now = asyncio.get_running_loop().time()
        quiet = None  # the window restarts once the wire is quiet (see `Session.busy_at`)
        while calls:
            deadline, window, call = calls[0]
            if call.answered or call.finished:
                calls.popleft()
                continue
            if quiet is None:
                quiet = self._session.busy_at(now)
            deadline = max(deadline, quiet + window)
            if deadline <= now:
                calls.popleft()
                call.cancel()
                call.deliver(
                    WorkerRejected(
                        f"{self._session.label} did not answer {call.name}() within {ACCEPT_TIMEOUT_S:g}s",
                        "DEADLINE_EXCEEDED",
                    )
                )
            else:
                self._timer = asyncio.get_running_loop().call_at(deadline, self._check)
                return


class StartByPassed(Exception):
    """A job's call reached its worker after its start-by time (`CallRecord.start_by`), and was declined unstarted.

    Not a refusal to rotate past: the owner lease it was placed under may
    have lapsed, so no worker may start it now; its job goes back to the store.
    """


def rejection(reject: pb.Reject, label: str, name: str) -> WorkerRejected | WorkerBroken:
    """The error a Reject frame stands for: `WorkerRejected` for a transient code, else `WorkerBroken`."""
    code = status_name(reject.code)
    text = f"{label} rejected {name}(): {code}: {reject.message}"
    if code in TRANSIENT_CODES:
        return WorkerRejected(text, code, full=0 < reject.capacity <= reject.in_flight)
    return WorkerBroken(text, code)


ACCEPT_TIMEOUT_S: Final[float] = 3.0
"""How long a dispatch waits for a worker's Accept or Reject before moving on."""

INTAKE_BYTES_PER_S: Final[float] = 50e6
"""The slowest rate a worker is allowed to take in a call's arguments once they arrived (parse and copy
them before it can answer): a call with large arguments gets that much longer to be answered (1 GiB: ~21 s).
Memory moves at several GB/s; this leaves room for a machine whose cores and memory are busy."""

INTAKE_FREE_BYTES: Final[int] = 1 << 20
"""Arguments smaller than this get no extra time (parsing them takes well under a millisecond)."""

CANCEL_CONFIRM_S: Final[float] = 2.0
"""How long a cancelled caller waits for the worker to confirm its task stopped."""

PLAIN_ABORT_S: Final[float] = 0.25
"""The same for a plain call (it cannot be stopped; one past its hard timeout gets its worker killed instead):
a function holding the GIL in C code keeps its worker from confirming anything, and its caller must not wait."""


async def call_routine(dispatcher: Dispatches, task: CallRecord) -> Any:
    """Run a coroutine routine's task through ``dispatcher`` and return its result.

    The task's timeout bounds the whole call, waiting included; on expiry
    the remote task is cancelled and `TimeoutError` raised. Cancelling the
    caller cancels the remote task.
    """
    ok, value = await call_outcome(dispatcher, task)
    if not ok:
        raise value
    return value


async def call_outcome(dispatcher: Dispatches, task: CallRecord) -> tuple[bool, Any]:
    """`call_routine` with the routine's outcome as data: ``(True, value)`` or ``(False, the exception it raised)``.

    Whatever the routine raised (`SystemExit`, `CancelledError` ...) is data
    here, never this coroutine's control flow: only what happens on this side
    (the caller cancelled, the worker lost, the timeout) raises. A plain call
    past its timeout is given up after `PLAIN_ABORT_S` at most: its worker
    stops it, or the pool kills that worker then (`_dispatch._path.OVERDUE_GRACE_S`).
    """
    if task.timeout is not None:
        task.deadline = time.monotonic() + task.timeout  # sent as the time left: a worker enforces a plain call's
    task.arrival = None  # a new call: a new place in the queue (placed again after a handback, it keeps it)
    async with asyncio.timeout(task.timeout) if task.timeout is not None else _UNBOUNDED:
        call = await dispatcher.dispatch(task)
        while True:
            try:
                frame = await call.receive()
            except HandedBack:  # a queued plain call came back unstarted: placed again
                call = await dispatcher.dispatch(task)
                continue
            except BaseException:
                await call.abort(PLAIN_ABORT_S if task.plain else CANCEL_CONFIRM_S)
                raise
            return outcome_result(frame.outcome, task.name)


_UNBOUNDED: Final = contextlib.nullcontext()
"""A call without a timeout skips the timer (one less loop.call_at and cancel per call)."""


def outcome_result(outcome: pb.Outcome, name: str) -> tuple[bool, Any]:
    """Decode a final outcome: ``(True, value)``, or ``(False, the exception it stands for)``.

    The one place an Outcome frame becomes a value or an error: a RAISE
    is the routine's own exception (its worker traceback as ``__cause__``),
    a result that cannot be unpickled is a `SerializationError`, a call
    the worker cancelled while stopping is `WorkerBroken`.
    """
    kind = outcome.kind
    made_by = outcome.interpreter
    if made_by and made_by != wire.INTERPRETER:  # code by value of another Python: nothing of it is loaded (54)
        try:
            wire.check_interpreter(made_by, f"the outcome of {name}()")
        except SerializationError as exc:
            return False, exc
    if kind == pb.Outcome.RETURN:
        try:
            return True, wire.loads(outcome.value, what=f"the result of {name}()")
        except Exception as exc:  # noqa: BLE001 - an unpicklable result is the call's outcome, raised to its caller
            return False, exc
    if kind == pb.Outcome.RAISE:
        return False, wire.unpack_exception(outcome.value, outcome.traceback, name)
    if kind == pb.Outcome.CANCELLED:
        return False, WorkerBroken(f"{name}() was cancelled on the worker (it was stopping) before it finished")
    return False, WorkerBroken(f"{name}(): unexpected outcome {pb.Outcome.Kind.Name(kind)}")


def call_failure(call: OutgoingCall, name: str) -> BaseException | None:
    """Why a finished call failed (to halt its workflow): the routine's own exception; None if it did not.

    A call its caller cancelled (or timed out) did not fail: the caller chose to stop it.
    """
    final = call.final
    if call.cancelled_here or final is None:
        return None
    if isinstance(final, BaseException):
        return final
    if not final.HasField("outcome") or final.outcome.kind not in (pb.Outcome.RAISE, pb.Outcome.CANCELLED):
        return None
    ok, error = outcome_result(final.outcome, name)
    return None if ok else error


def outcome_value(outcome: pb.Outcome, name: str) -> Any:
    """The value a final outcome stands for; raises the exception it carries."""
    ok, value = outcome_result(outcome, name)
    if not ok:
        raise value
    return value


class RemoteGenerator:
    """An async-generator routine running on a worker, driven from here.

    Behaves like a local async generator: ``async for``, ``asend``,
    ``athrow``, ``aclose``. Nothing is dispatched until the first step.
    Each step waits at most the task's timeout.
    """

    def __init__(self, dispatcher: Dispatches, task: CallRecord) -> None:
        self._dispatcher = dispatcher
        self._task = task
        self._call: OutgoingCall | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done = False

    def __aiter__(self) -> RemoteGenerator:
        return self

    async def __anext__(self) -> Any:
        return await self._step(pb.Step.NEXT)

    async def asend(self, value: Any) -> Any:
        """Send ``value`` in; return the next value yielded."""
        return await self._step(
            pb.Step.SEND, wire.dumps(value, what=f"the value sent to {self._task.name}()", oob=True)
        )

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise an exception at the generator's ``yield``; return what it yields next."""
        exc = typ if isinstance(typ, BaseException) else (typ() if val is None else val)
        return await self._step(pb.Step.THROW, wire.dumps(exc, what=f"the exception thrown into {self._task.name}()"))

    async def aclose(self) -> None:
        """Close the generator (its ``finally`` blocks run on the worker)."""
        if self._done:
            return
        if self._call is None:
            self._done = True
            return
        try:
            await self._step(pb.Step.CLOSE)
        except StopAsyncIteration:
            pass

    async def _step(self, kind: int, value: bytes = b"") -> Any:
        if self._done:
            raise StopAsyncIteration
        try:
            async with asyncio.timeout(self._task.timeout):
                if self._call is None:
                    self._loop = asyncio.get_running_loop()
                    self._call = await self._dispatcher.dispatch(self._task)
                self._call.step(kind, value)
                frame = await self._call.receive()
        except BaseException:
            await self._abandon()
            raise
        outcome = frame.outcome
        if outcome.kind == pb.Outcome.YIELD:
            return wire.loads(outcome.value, what=f"a value yielded by {self._task.name}()")
        self._done = True
        if outcome.kind == pb.Outcome.STOP:
            raise StopAsyncIteration
        return outcome_value(outcome, self._task.name)

    async def _abandon(self) -> None:
        self._done = True
        if self._call is not None:
            await self._call.abort(CANCEL_CONFIRM_S)

    def __del__(self) -> None:
        # Dropped mid-stream without aclose(): cancel it on the worker.
        call, loop = self._call, self._loop
        if call is None or call.finished or loop is None or loop.is_closed() or sys.is_finalizing():
            return
        try:
            loop.call_soon_threadsafe(call.cancel)
        except RuntimeError:
            pass  # the loop closed meanwhile; the stream's end cancels the call
