"""`Task`: what balancers and backpressure hooks see of a call; `CallRecord`: the call itself as it travels.

The pool hands hooks and balancers its own record of the call (no copy per
call, on the path every call takes), typed as the public `Task`: the
attributes a hook may read. The rest of the record (the routine's code,
the pickled arguments, deadlines, tracing, callbacks) is the pool's own and
changes between versions.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Final, Protocol, runtime_checkable

from .._base import public
from .._transport import Session
from .._transport import leakypool_pb2 as pb

MIN_REMAINING_S: Final[float] = 0.001
"""The least time left a call is sent with (its deadline may pass while the Call frame is written)."""


@runtime_checkable
class Task(Protocol):
    """One routine call as a balancer (``delegate(task, ...)``) or a backpressure hook (``ctx.task``) sees it.

    Read-only. On a worker the hook sees it before the call is accepted, so
    nothing here needs the arguments decoded.
    """

    @property
    def name(self) -> str:
        """The routine's qualified name (``module.function``)."""
        ...

    @property
    def generator(self) -> bool:
        """An async-generator routine (its values stream back)."""
        ...

    @property
    def plain(self) -> bool:
        """A plain ``def`` function (one at a time per worker, on a thread of its own)."""
        ...

    @property
    def timeout(self) -> float | None:
        """Seconds the call may run (None: no limit)."""
        ...

    @property
    def queue(self) -> str:
        """The named queue whose limits it takes ("": none)."""
        ...

    @property
    def concurrency(self) -> int:
        """Calls of its key that may run at once (0: no limit)."""
        ...

    @property
    def total(self) -> int:
        """Calls of its queue that may run at once (0: no limit)."""
        ...

    @property
    def key(self) -> str:
        """The key its queue's ``concurrency`` counts by ("": none)."""
        ...

    @property
    def workflow(self) -> str:
        """The workflow it belongs to ("": none)."""
        ...

    @property
    def halt_on_error(self) -> bool:
        """A failure of this call halts its workflow."""
        ...

    @property
    def priority(self) -> int:
        """Its place in the pool's line (higher first)."""
        ...


@dataclasses.dataclass(slots=True, eq=False)
class CallRecord:
    """One routine call on its way to a worker: the `Task` hooks see, and its wire form.

    The routine's code (``digest``, ``blob``) and pickled arguments
    (``args``) cross to the worker; the rest is how the pool places and
    bounds it. Hooks and balancers receive this object typed as `Task`.
    """

    name: str
    generator: bool
    digest: bytes
    blob: bytes
    args: bytes
    timeout: float | None = None
    queue: str = ""
    concurrency: int = 0
    total: int = 0
    key: str = ""
    workflow: str = ""
    halt_on_error: bool = False
    parent: int = 0
    dispatch_deadline: float | None = None  # this call's own, over the pool's (not sent to workers)
    traceparent: str = ""  # W3C trace context it arrived with (a nested call), passed on untraced
    trace: Any = None  # while it is dispatched with tracing on: its span (`_observe._trace.Attempt`)
    priority: int = 0  # higher first in the admission queue (not sent to workers)
    rate: tuple[int, float] | None = None  # the queue's RateLimit (n, per) (not sent to workers)
    plain: bool = False  # a plain ``def`` function: one at a time per worker, on a thread of its own
    deadline: float | None = None  # when its timeout runs out (monotonic), once it is dispatched
    prefetch: int | None = None  # a plain call: at most this many of ours ahead of it in a worker's line (None: any)
    arrival: int | None = None  # its place in the pool's admission queue: kept when it is handed back (not sent)
    interpreter: str = ""  # the interpreter of code its routine or arguments carry by value ("": none; see `_wire`)
    build: str = ""  # the build of the code it names ("": any worker's); the pool stamps its own on a call
    start_by: float = 0.0  # a job's call: the latest time a worker may start it (Unix seconds; 0: none)
    started: Callable[[], object] | None = None  # called once its worker said it began (an executor's; not sent)

    def remaining(self) -> float | None:
        """Seconds left before the call's deadline (its whole timeout until it is dispatched); None: no limit."""
        if self.deadline is None:
            return self.timeout or None
        return max(self.deadline - time.monotonic(), MIN_REMAINING_S)

    def fill(self, call: pb.Call, session: Session) -> None:
        """Write this task into ``call``, bound for ``session``; the routine's blob crosses once per stream."""
        routine = call.routine
        routine.digest = self.digest
        routine.name = self.name
        routine.generator = self.generator
        routine.plain = self.plain
        if self.prefetch == 0:
            call.no_prefetch = True  # a plain call that must never wait inside a worker
        if self.interpreter:
            call.interpreter = self.interpreter
        if self.build:
            call.build = self.build
        if self.start_by:
            call.start_by = self.start_by
        if self.digest not in session.sent_digests:
            session.sent_digests.add(self.digest)
            routine.blob = self.blob
        if self.args:
            call.args = session.carry(self.args)
        call.parent = self.parent
        if self.timeout:
            call.timeout = self.remaining() or 0.0  # the deadline travels: the worker enforces a plain call's
        if self.trace is not None:
            call.traceparent = self.trace.header()
        elif self.traceparent:
            call.traceparent = self.traceparent
        if self.queue or self.workflow:
            limits = call.limits
            limits.queue, limits.key, limits.workflow = self.queue, self.key, self.workflow
            limits.concurrency, limits.total, limits.halt_on_error = self.concurrency, self.total, self.halt_on_error

    @classmethod
    def from_message(cls, call: pb.Call, blob: bytes) -> CallRecord:
        """The task a received Call message describes (``blob``: the routine, resolved)."""
        routine = call.routine
        task = cls(routine.name, routine.generator, routine.digest, blob, call.args, call.timeout or None)
        if call.HasField("limits"):
            limits = call.limits
            task.queue, task.concurrency, task.total = limits.queue, limits.concurrency, limits.total
            task.key, task.workflow, task.halt_on_error = limits.key, limits.workflow, limits.halt_on_error
        task.traceparent = call.traceparent
        task.plain = routine.plain
        task.interpreter = call.interpreter
        task.build = call.build
        task.start_by = call.start_by
        if call.no_prefetch:
            task.prefetch = 0
        return task


public(Task)
