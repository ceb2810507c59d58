"""A call this worker hosts, as both of its loops see it: the call, its routine, what it reports."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from .._call import CallRecord
from .._transport import Session, wire
from .._transport import leakypool_pb2 as pb

Outcome = tuple[int, bytes, str]
"""(Outcome kind, pickled value, traceback text): what the runner hands the service."""

CANCELLED: Outcome = (pb.Outcome.CANCELLED, b"", "")
STOP: Outcome = (pb.Outcome.STOP, b"", "")


class Hosted:
    """A call a dispatcher opened on this worker, from admission to its last frame."""

    __slots__ = (
        "cancelled",
        "code",
        "counted",
        "deadline",
        "entered",
        "id",
        "landing",
        "nested",
        "pending",
        "queued",
        "runner",
        "session",
        "settled",
        "started",
        "steps",
        "task",
        "timer",
    )

    def __init__(self, session: Session, call_id: int, task: CallRecord, code: Code) -> None:
        self.session = session
        self.id = call_id
        self.task = task
        self.code = code
        # A generator's Steps, used where routines run only (a coroutine call has none).
        self.steps: asyncio.Queue[pb.Step] | None = asyncio.Queue() if task.generator else None
        self.runner: asyncio.Task[None] | None = None
        self.entered = False  # its runner's first step ran (a runner cancelled before that never ran `_run`)
        self.cancelled = False
        self.nested = 0  # nested calls it is awaiting now
        self.started = 0.0  # when it was accepted (monotonic)
        # A plain call's, in the worker's line (`_plain.PlainLine`):
        self.deadline: float | None = None  # when its caller's time runs out (monotonic), if it has a timeout
        self.queued = False  # its Accept said queued: a Started must reach the wire before it begins
        self.landing = False  # a Started must reach the wire before it begins all the same (its Accept had not)
        self.pending = False  # it may not begin yet: its Accept is being written (`PlainCalls._start`)
        self.counted = False  # counted against the worker's task limit (at its start)
        self.settled = False  # in the service's books as ended (answered, counted out)
        self.timer: asyncio.TimerHandle | None = None  # its hard limit, armed on the loop at its arrival


class Code:
    """A routine as received: its blob, unpickled on first use (where routines run)."""

    __slots__ = ("blob", "fn", "name")

    def __init__(self, blob: bytes, name: str) -> None:
        self.blob = blob
        self.name = name
        self.fn: Callable[..., Any] | None = None

    def resolve(self) -> Callable[..., Any]:
        if self.fn is None:
            obj = wire.loads(self.blob, what=f"routine {self.name}")
            self.fn = getattr(obj, "__wrapped__", obj)
        return self.fn


class Host(Protocol):
    """What the runner needs of the gRPC side (the `WorkerService`)."""

    def finish(self, hosted: Hosted, outcome: Outcome) -> None:
        """The call ended with ``outcome`` (runs where the streams live)."""
        ...

    def started(self, hosted: Hosted) -> None:
        """``hosted``'s routine awaited something in its first step (runs where the streams live)."""
        ...

    def send(self, hosted: Hosted, outcome: Outcome) -> None:
        """A generator yielded ``outcome`` (runs where the streams live)."""
        ...

    def park(self, hosted: Hosted) -> None:
        """``hosted`` awaits a nested call (runs where the streams live)."""
        ...

    def unpark(self, hosted: Hosted) -> None:
        """``hosted``'s nested call returned (runs where the streams live)."""
        ...
