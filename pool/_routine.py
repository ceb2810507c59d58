"""``@pool.routine``: a function whose calls run on the pool's workers, and `CallOptions`, what it sets.

Calling a routine pickles its arguments (a bad argument fails right there), finds where to send the
call — the innermost active `WorkerPool` or, inside a worker, the dispatcher of the running task —
and returns a coroutine (or, for an async generator function, an async iterator) that runs it remotely.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import inspect
import math
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

from ._base import public
from ._call import CallRecord, current_dispatcher
from ._dispatch import Queue
from ._errors import ConfigError
from ._transport import wire

if TYPE_CHECKING:
    from ._jobs import Job

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-routine (and per-call) settings; see `routine` and `Routine.options`."""

    timeout: float | None = None
    queue: Queue | None = None
    key: str = ""
    workflow: str = ""
    halt_on_error: bool = False
    dispatch_deadline: float | None = None
    job_id: str = ""
    retries: int = 0
    retry_backoff: float = 1.0
    retry_on: tuple[type[BaseException], ...] = ()
    priority: int = 0
    delay: float = 0.0
    run_at: datetime.datetime | None = None
    connection: Any = None
    prefetch: int | None = None
    pinned: bool = True

    def __post_init__(self) -> None:
        self._check_call_options()
        self._check_job_options()
        check_schedule_options(self)

    def _check_job_options(self) -> None:
        _check_seconds("dispatch_deadline", self.dispatch_deadline)
        if not isinstance(self.job_id, str):
            raise TypeError(f"job_id: expected a str, got {self.job_id!r}")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise ValueError(f"retries: expected an int >= 0, got {self.retries!r}")
        backoff = self.retry_backoff
        if isinstance(backoff, bool) or not isinstance(backoff, (int, float)) or not (0 <= backoff < math.inf):
            raise ValueError(f"retry_backoff: expected seconds >= 0, got {backoff!r}")
        retry_on = self.retry_on
        if isinstance(retry_on, type):
            object.__setattr__(self, "retry_on", (retry_on,))
        elif not isinstance(retry_on, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in retry_on
        ):
            raise TypeError(f"retry_on: expected an exception type or a tuple of them, got {retry_on!r}")

    def _check_call_options(self) -> None:
        _check_seconds("timeout", self.timeout)
        if self.queue is not None and not isinstance(self.queue, Queue):
            raise TypeError(f"queue: expected a pool.Queue or None, got {self.queue!r}")
        for name in ("key", "workflow"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name}: expected a str, got {getattr(self, name)!r}")
        if self.key and self.queue is None:
            raise ValueError(f"key: a concurrency key needs a queue to apply to, got key={self.key!r} and no queue")
        for name in ("halt_on_error", "pinned"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        if self.prefetch is not None and (type(self.prefetch) is not int or self.prefetch < 0):
            raise ValueError(f"prefetch: expected an int >= 0 or None (the pool's), got {self.prefetch!r}")


def _check_seconds(name: str, value: object) -> None:
    """Raise one line unless ``value`` is None or a finite number of seconds > 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise TypeError(f"{name}: expected seconds > 0 or None, got {value!r}")
    if value is not None and not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name}: expected seconds > 0 or None, got {value!r}")


def check_schedule_options(options: CallOptions) -> None:
    """Raise one clear line for a bad ``priority``, ``delay``, ``run_at`` or ``connection``.

    Raises:
        TypeError, ValueError: the option named first in the message is wrong.
    """
    priority = options.priority
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority: expected an int (higher runs first, default 0), got {priority!r}")
    delay = options.delay
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"delay: expected seconds >= 0, got {delay!r}")
    if not (delay >= 0 and math.isfinite(delay)):
        raise ValueError(f"delay: expected seconds >= 0, got {delay!r}")
    run_at = options.run_at
    if run_at is not None:
        if not isinstance(run_at, datetime.datetime):
            raise TypeError(f"run_at: expected an aware datetime, got {run_at!r}")
        if run_at.tzinfo is None or run_at.utcoffset() is None:
            raise ValueError(
                f"run_at: expected an aware datetime (e.g. tzinfo=datetime.UTC), got the naive {run_at.isoformat()}"
            )
        if delay:
            raise ValueError(f"run_at: give run_at or delay, not both (got delay={delay!r})")
    connection = options.connection
    if connection is not None and not callable(getattr(connection, "is_in_transaction", None)):
        raise TypeError(f"connection: expected an asyncpg connection, got {connection!r}")


def job_only(options: CallOptions) -> str:
    """The options set that only a job can honour (``delay=30``...), or "" (a call would ignore them)."""
    named = [
        f"{name}={getattr(options, name)!r}" for name in ("delay", "run_at", "connection") if getattr(options, name)
    ]
    return ", ".join(named)


class Routine(Generic[P, R]):
    """A function that runs on a pool's workers: coroutine, async generator or plain ``def``.

    Use `routine` to make one. Calling it returns an awaitable (or an async
    iterator) exactly as an async function would, but the body runs on a worker
    of the innermost active pool. A plain ``def`` function's call is awaitable
    too; the worker runs it on a thread of its own, one plain call at a time
    (see docs/concepts.md). Works on methods too (``self`` is pickled and
    shipped with the call).
    """

    __name__: str  # these three are the function's, copied by functools.update_wrapper
    __qualname__: str
    __wrapped__: Callable[P, R]

    def __init__(self, fn: Callable[P, R], options: CallOptions, base: Routine[P, R] | None = None) -> None:
        if not callable(fn) or isinstance(fn, type):
            raise TypeError(f"@routine needs a function (async def, async generator or plain def), got {fn!r}")
        if inspect.isgeneratorfunction(fn):
            raise TypeError(
                f"@routine cannot run a plain generator function ({fn!r}): its generator cannot leave the worker; "
                "make it an async generator (async def ... yield) or return a list"
            )
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._call_options = options
        self._generator = inspect.isasyncgenfunction(fn)
        self._plain = not (self._generator or inspect.iscoroutinefunction(fn))
        self._base = base if base is not None else self
        self._code: tuple[bytes, bytes] | None = None
        self._interpreter = ""  # the interpreter of its blob when it is code by value (`code`), else ""
        self._fields: dict[str, Any] | None = None  # a CallRecord's fields but its arguments (see `task`)
        self._job_only = job_only(options)  # checked once here, not per call

    @property
    def generator(self) -> bool:
        """Whether the routine is an async generator (it streams values)."""
        return self._generator

    @property
    def plain(self) -> bool:
        """Whether the routine is a plain ``def`` function (it runs on a worker's thread, one call at a time)."""
        return self._plain

    @property
    def call_options(self) -> CallOptions:
        """This routine's options (timeout, queue, key, workflow)."""
        return self._call_options

    def options(self, **changes: Any) -> Routine[P, R]:
        """A variant of this routine with some options changed, for one call or many.

        ``await fetch.options(timeout=2.0)(url)`` bounds one call at 2 s.

        Raises:
            TypeError, ValueError: an unknown option or a bad value.
        """
        return Routine(self._fn, dataclasses.replace(self._call_options, **changes), self._base)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        if self._job_only:
            raise ConfigError(
                f"{self.__qualname__}(): {self._job_only} applies to jobs only; use .submit(...), or drop the option"
            )
        dispatcher = current_dispatcher(self.__qualname__)
        task = self.task(args, kwargs)
        if self._generator:
            return dispatcher.generator(task)  # type: ignore[return-value]  # R is fn's async iterator; this one stands for it
        return dispatcher.call(task)  # type: ignore[return-value]  # R is fn's awaitable; this coroutine stands for it

    async def submit(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Write this call to the pool's job store as a durable `pool.Job`; returns once it is committed.

        The job survives a crash or restart of this process: the pool's
        scheduler (this process's, or any other's on the same store) runs it
        at least once. ``options(job_id=...)`` makes the submission
        idempotent: while a job with that id is pending or running, it is
        returned instead of a second one.

        Raises:
            ConfigError: the pool has no store (``WorkerPool(store=...)`` or
                ``LEAKYPOOL_STORE``), or this routine is an async generator.
            SerializationError: an argument cannot be pickled (nothing is stored).
            AdmissionRejected: the store's active jobs reached ``max_pending``.
            StoreError: the store could not commit the job (nothing is stored).
        """
        if self._generator:
            raise ConfigError(f"{self.__qualname__}() is an async generator: only coroutine routines run as jobs")
        dispatcher = current_dispatcher(self.__qualname__)
        submit = getattr(dispatcher, "submit", None)
        if submit is None:
            raise ConfigError(
                f"{self.__qualname__}.submit(): jobs are submitted from a dispatching process, not a worker"
            )
        job: Job = await submit(self.task(args, kwargs), self._call_options)  # `pool._pool._jobs.PoolJobs.submit`
        return job

    def task(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallRecord:
        """The `CallRecord` for one call (pickles the arguments; raises if they cannot be)."""
        fields = self._fields
        if fields is None:  # every field but the arguments, by name, computed once
            digest, blob = self._base.code()
            options = self._call_options
            queue = options.queue
            fields = self._fields = {
                "name": self.__qualname__,
                "generator": self._generator,
                "digest": digest,
                "blob": blob,
                "timeout": options.timeout,
                "key": options.key,
                "workflow": options.workflow,
                "halt_on_error": options.halt_on_error,
                "dispatch_deadline": options.dispatch_deadline,
                "priority": options.priority,
                "plain": self._plain,
                "prefetch": options.prefetch,
            }
            if queue is not None:
                fields.update(queue=queue.name, concurrency=queue.concurrency, total=queue.total or 0)
                fields["rate"] = (queue.rate.n, float(queue.rate.per)) if queue.rate else None
        packed = wire.pack_args(self.__qualname__, args, kwargs)
        interpreter = self._base._interpreter or (wire.interpreter_of(packed) if packed else "")
        return CallRecord(args=packed, interpreter=interpreter, **fields)

    def code(self) -> tuple[bytes, bytes]:
        """``(digest, blob)``: this routine pickled for the wire, computed once (and whether it is code by value)."""
        if self._code is None:
            blob = wire.dumps(self, what=f"routine {self.__qualname__}")
            self._code = (wire.digest(blob), blob)
            self._interpreter = wire.interpreter_of(blob)
        return self._code

    @overload
    def __get__(self, instance: None, owner: type) -> Routine[P, R]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> BoundRoutine: ...
    def __get__(self, instance: object | None, owner: type | None = None) -> Any:
        if instance is None:
            return self
        return BoundRoutine(self, instance)

    def __reduce__(self) -> str | tuple[Any, ...]:
        if self._base is not self:
            return (Routine._variant, (self._base, self._call_options))
        if _importable(self):
            return self.__qualname__
        return (Routine, (self._fn, self._call_options))

    def __repr__(self) -> str:
        return f"<routine {self.__module__}.{self.__qualname__}>"

    @staticmethod
    def _variant(base: Routine[Any, Any], options: CallOptions) -> Routine[Any, Any]:
        """``base`` with ``options``: what a pickled `options` variant loads as (``pool.Routine._variant``)."""
        return Routine(base.__wrapped__, options, base)


class BoundRoutine:
    """A routine reached through an instance: calls pass the instance as ``self``."""

    def __init__(self, routine: Routine[Any, Any], instance: object) -> None:
        self.routine = routine  # (a bound method's ``__func__``)
        self.instance = instance  # passed as ``self`` (a bound method's ``__self__``)
        self.__qualname__ = routine.__qualname__
        self.__name__: str = routine.__name__
        self.__doc__ = routine.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.routine(self.instance, *args, **kwargs)

    def options(self, **changes: Any) -> BoundRoutine:
        """See `Routine.options`."""
        return BoundRoutine(self.routine.options(**changes), self.instance)

    async def submit(self, *args: Any, **kwargs: Any) -> Job:
        """See `Routine.submit`."""
        return await self.routine.submit(self.instance, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<bound routine {self.__qualname__} of {self.instance!r}>"


def _importable(routine: Routine[Any, Any]) -> bool:
    """Whether the worker can find ``routine`` by module and name (pickle by reference).

    Not for ``__main__`` nor for a module registered with cloudpickle to go by value.
    """
    module_name = routine.__module__
    module = sys.modules.get(module_name)
    if module is None or module_name == "__main__" or wire.by_value(module_name):
        return False
    obj: Any = module
    for part in routine.__qualname__.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return False
    return obj is routine


class RoutineDecorator(Protocol):
    """What ``@routine(...)`` with options returns: it makes a routine of an async or plain function."""

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> Routine[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __call__(self, fn: Callable[P, AsyncIterator[T]], /) -> Routine[P, AsyncIterator[T]]: ...  # type: ignore[overload-overlap]  # first match wins: an async def above, a plain def below
    @overload
    def __call__(self, fn: Callable[P, T], /) -> Routine[P, Coroutine[Any, Any, T]]: ...
    def __call__(self, fn: Callable[..., Any], /) -> Routine[..., Any]: ...


@overload
def routine(fn: Callable[P, Coroutine[Any, Any, T]], /) -> Routine[P, Coroutine[Any, Any, T]]: ...
@overload
def routine(fn: Callable[P, AsyncIterator[T]], /) -> Routine[P, AsyncIterator[T]]: ...  # type: ignore[overload-overlap]  # first match wins: an async def above, a plain def below
@overload
def routine(fn: Callable[P, T], /) -> Routine[P, Coroutine[Any, Any, T]]: ...
@overload
def routine(
    *,
    timeout: float | None = None,
    queue: Queue | None = None,
    key: str = "",
    workflow: str = "",
    halt_on_error: bool = False,
    dispatch_deadline: float | None = None,
    job_id: str = "",
    retries: int = 0,
    retry_backoff: float = 1.0,
    retry_on: tuple[type[BaseException], ...] = (),
    priority: int = 0,
    delay: float = 0.0,
    run_at: datetime.datetime | None = None,
    prefetch: int | None = None,
    pinned: bool = True,
) -> RoutineDecorator: ...
def routine(fn: Any = None, /, **options: Any) -> Any:
    """Make a function a routine: its calls run on the pool's workers.

    ``async def`` functions, async generators and plain ``def`` functions all work; calling the routine
    returns an awaitable (an async iterator for a generator) wherever the function was defined. Use bare
    (``@pool.routine``) or with options (``@pool.routine(timeout=5.0)``); `Routine.options` overrides any
    option per call:

    - ``timeout``: seconds for the whole call, waiting included; then the remote task is cancelled and the
      caller gets ``TimeoutError``. A hard limit on a plain function: its worker exits and is replaced.
    - ``queue``: a `pool.Queue`, at most its ``concurrency`` calls at once; ``key``: a concurrency key
      (tenant, user...), each value with its own ``concurrency`` within the queue.
    - ``workflow``: calls with the same workflow key run one at a time, in order; ``halt_on_error``: if
      this call fails, those queued behind it fail with `WorkflowHalted` instead of running.
    - ``dispatch_deadline``: seconds the call (a job: from submission) may wait for limits and a worker
      before it fails with `CapacityTimeout` (default: the pool's).
    - ``priority`` (default 0): higher first among calls waiting for a worker and among due jobs.
    - ``prefetch`` (plain functions): at most this many of the pool's calls ahead of it in a worker's line (0: none).
    - Jobs (`Routine.submit`) only: ``job_id`` (the idempotency key); ``retries`` after the first attempt
      when the worker is lost or it raises a type in ``retry_on`` (exponential back-off from
      ``retry_backoff`` s, jittered); ``delay`` (s) or ``run_at`` (an aware datetime): when it is due;
      ``connection``: an asyncpg connection in a transaction, the job exists iff it commits;
      ``pinned`` (default True): the job runs only on workers of the build it was submitted from (the
      pool's ``build``); False: on the build of whichever process dispatches it (docs/concepts.md).

    Raises:
        TypeError: ``fn`` is not a function (or is a plain generator function), or a bad option.
    """
    call_options = CallOptions(**options)
    if fn is None:
        return lambda f: Routine(f, call_options)
    return Routine(fn, call_options)


public(CallOptions, Routine, Routine._variant, routine)
