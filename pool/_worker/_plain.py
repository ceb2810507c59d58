"""Plain ``def`` routines: where a worker runs them, one at a time, and what one leaves behind.

    Call (plain) ──> admission: another plain call running? ──> BUSY (Reject, transient)
         │ accepted
         v
    runner task ──> PlainThread.submit(call_plain) ──> the plain thread: unpickle, run, pickle
         │ awaits it, shielded                              │
         │ cancelled? ──> CANCELLED now, the result is      │ returns
         │               dropped when it comes              v
         └──> finish(outcome)                    plain_done: the next plain call may start

A plain function cannot be interrupted, so it runs on a daemon thread of
its own: the worker's loop stays free to accept, reject and answer State
(Python hands the GIL over every switch interval) and a cancelled caller
only drops the result. A call with a timeout gets a hard limit instead:
past its deadline the worker reports `TimeoutError` for it and exits, so a
stuck function never holds a slot (`WorkerService._overdue`; a worker too
stuck to run its own deadline is killed by its pool). The thread is a
daemon so that such an exit is not held up by the function still running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any

from .._transport import _wire
from .._transport._proto import leakypool_pb2 as pb
from ._admission import WorkerAdmission
from ._hosted import Hosted, Outcome


class PlainSlot:
    """The worker's one plain call at a time, and its hard limit.

    Args:
        admission: Turns further plain calls away while the slot is taken.
        overdue: Called with the call and its timeout if it is still on the
            thread at its deadline (the worker then answers for it and exits).
    """

    def __init__(self, admission: WorkerAdmission, overdue: Callable[[Hosted, float], None]) -> None:
        self._admission = admission
        self._overdue = overdue
        self._deadline: asyncio.TimerHandle | None = None

    def take(self, hosted: Hosted) -> None:
        """``hosted``, a plain call, was accepted; its timeout (the time its caller has left) is armed."""
        self._admission.plain_started(hosted)
        timeout = hosted.task.timeout
        if timeout:
            self._deadline = asyncio.get_running_loop().call_later(timeout, self._expire, hosted, timeout)

    def release(self, hosted: Hosted) -> set[Any]:
        """``hosted`` left the plain thread; returns whom to tell "room"."""
        if self._admission.plain is hosted and self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        return self._admission.plain_done(hosted)

    def _expire(self, hosted: Hosted, timeout: float) -> None:
        self._deadline = None
        if self._admission.plain is hosted:
            self._overdue(hosted, timeout)


class PlainThread:
    """One daemon thread that runs submitted functions in order (the worker's plain calls)."""

    def __init__(self, name: str = "leakypool-plain") -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._started = False

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run ``fn()`` on the thread (after what was submitted before); its future."""
        if not self._started:
            self._started = True
            self._thread.start()
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def stop(self) -> None:
        """Let the thread end once its current function returns (it is a daemon: nothing waits for it)."""
        if self._started:
            self._jobs.put(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the future's awaiter, who re-raises it
                future.set_exception(exc)


def call_plain(hosted: Hosted) -> Outcome:
    """A plain routine's whole run, on the plain thread: unpickle, call, pickle; its outcome."""
    name = hosted.task.name
    try:
        fn = hosted.code.resolve()
        args, kwargs = _wire.unpack_args(hosted.task.args, name)
        value = fn(*args, **kwargs)
        return (pb.Outcome.RETURN, _wire.dumps(value, what=f"the result of {name}()", oob=True), "")
    except BaseException as exc:  # noqa: BLE001 - user code: any exception is the routine's outcome
        return (pb.Outcome.RAISE, *_wire.pack_exception(exc, name))


def timed_out(hosted: Hosted, timeout: float) -> Outcome:
    """The outcome of a plain call still running at its deadline: the caller's `TimeoutError`."""
    name = hosted.task.name
    error = TimeoutError(f"{name}() ran past its timeout of {timeout:g}s; the worker running it exits")
    return (pb.Outcome.RAISE, *_wire.pack_exception(error, name))
