"""The errors and warnings leakypool raises, under one root.

    PoolError
    ├── PoolClosed            no open pool to dispatch to (retry: open one)
    ├── WorkerBroken          the worker was lost mid-call (retry may succeed); a BrokenProcessPool too
    ├── WorkerRejected        a worker said "not now" (the pool rotates past it)
    ├── WorkerStartError      a worker this pool spawned did not start
    │   └── WorkerInitError   ...because its initializer raised (the cause attached); a BrokenProcessPool too
    ├── NoWorkersAvailable    no worker took the call (retry later may succeed)
    │   ├── CapacityTimeout   ...within the dispatch deadline, while queued
    │   └── VersionMismatch   ...for no worker runs the Python, or the code version, it was made for
    ├── AdmissionRejected     the pool refused to queue it; see retry_after
    ├── Deadlock              the call waits on a limit its own caller holds
    ├── WorkflowHalted        an earlier call of its workflow failed (halt_on_error)
    ├── SerializationError    a value could not cross (also a TypeError)
    │   └── PicklingError     ...it could not be pickled (also a pickle.PicklingError)
    ├── StoreError            the job store failed (disk full, database gone)
    ├── ProvisionError        a provisioner could not start a worker (the pool asks again later)
    └── ConfigError           a bad setting (also a ValueError)

    PoolWarning               base of every warning, to filter them as one

A routine's own exception is never wrapped: it is re-raised with its own
type, and the worker's traceback hangs from it as ``__cause__``
(`RemoteTraceback`), as ``concurrent.futures`` does for process pools.

Every error here pickles by value (a routine may catch one and return it)
and names its public module, ``pool``.
"""

from __future__ import annotations

import functools
import pickle
import sys
import warnings
from collections.abc import Callable
from concurrent.futures import BrokenExecutor
from types import ModuleType
from typing import TYPE_CHECKING, Any

import balancer

if TYPE_CHECKING:  # what they are once concurrent.futures.process is imported (see `_AfterImport`)
    from concurrent.futures.process import BrokenProcessPool as _Broken
else:
    _Broken = BrokenExecutor

__all__ = [
    "AdmissionRejected",
    "CapacityTimeout",
    "ConfigError",
    "Deadlock",
    "NoWorkersAvailable",
    "PicklingError",
    "PoolClosed",
    "PoolError",
    "PoolWarning",
    "ProvisionError",
    "RemoteTraceback",
    "SerializationError",
    "StoreError",
    "VersionMismatch",
    "WorkerBroken",
    "WorkerInitError",
    "WorkerRejected",
    "WorkerStartError",
    "WorkflowHalted",
]


class PoolError(Exception):
    """Root of every error leakypool raises itself."""


class PoolClosed(PoolError, RuntimeError):
    """There is no open pool to run the call on.

    Raised when a routine is called outside ``async with WorkerPool(...)``,
    or after the pool it was dispatched through has closed. Retrying cannot
    succeed until a pool is open.
    """


class WorkerBroken(PoolError, _Broken):
    """The worker running (or about to run) the call was lost.

    Also a ``concurrent.futures.process.BrokenProcessPool`` (so code written
    for ``ProcessPoolExecutor`` catches it), though only that worker's calls
    fail: the pool, and an `Executor` on it, go on. (That base is added when
    code imports ``concurrent.futures.process``; until then it is its base,
    ``BrokenExecutor``: ``import pool`` does not pay for ``multiprocessing``.)

    Its process died, its connection failed, or it was stopped before the
    call finished. The routine may have run in part. A retry can succeed on
    another worker; whether it is safe depends on the routine. Inside a
    balancer it means "failed for good": the pool evicts the worker (the
    transient kind is `WorkerRejected`).

    Attributes:
        code: The gRPC status code name involved, e.g. ``"UNAVAILABLE"``
            (information only; "" when there was none).
    """

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.code))


class WorkerRejected(PoolError):
    """A worker declined a call for now: busy (backpressure) or draining.

    Transient, by type: the pool keeps the worker and offers the call to
    the next one (also when the worker could not be reached for now).
    Callers see it only inside a load balancer (it is what the pool throws
    into the balancer's generator) or chained under `NoWorkersAvailable`.

    Attributes:
        code: The gRPC status code name, e.g. ``"RESOURCE_EXHAUSTED"``
            (information only).
        full: The worker was at its advertised capacity: it rejects any
            call until one of its tasks ends (and then tells the pool).
    """

    def __init__(self, message: str, code: str = "RESOURCE_EXHAUSTED", *, full: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.full = full

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (str(self), self.code))


class WorkerStartError(PoolError):
    """A worker process the pool spawned exited, or said nothing, before it was ready.

    Raised by ``async with WorkerPool(...)`` (the workers that did start are
    stopped again). Its stderr, shown above, usually says why. A retry can
    succeed if the cause was load (raise ``startup_timeout``).
    """


class WorkerInitError(WorkerStartError, _Broken):
    """A worker's ``initializer`` raised, so the worker exited before its first call.

    Also a ``concurrent.futures.process.BrokenProcessPool``, as the standard
    library's pool is broken by a raising initializer.

    Raised by ``async with WorkerPool(spawn=N, initializer=...)``, and by
    calls that wait for a worker once none is left because each new one's
    initializer raised (the pool keeps trying to start one, with back-off).
    ``__cause__`` is the initializer's exception, of its own type where it
    could be unpickled here. A retry can succeed only once what the
    initializer needs (a file, a server) is there.

    Attributes:
        traceback: The initializer's traceback in the worker, as text ("" if unknown).
    """

    def __init__(self, message: str, traceback: str = "") -> None:
        super().__init__(message)
        self.traceback = traceback

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}\n\n[initializer traceback]\n{self.traceback}" if self.traceback else text

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.args[0], self.traceback))


class NoWorkersAvailable(balancer.NoWorkersAvailable, PoolError):
    """No worker accepted the call.

    The pool's form of ``balancer.NoWorkersAvailable`` (it is a subclass,
    so ``except balancer.NoWorkersAvailable`` catches it too). Raised at
    once when the pool has no admission queue. A retry can succeed when a
    worker frees up or joins.
    """


class CapacityTimeout(NoWorkersAvailable):
    """The call waited in the admission queue past its dispatch deadline.

    It never started. Retrying can succeed once the load drops; if it keeps
    happening, the pool needs more workers or a longer deadline.
    """


class VersionMismatch(NoWorkersAvailable):
    """No worker of the pool runs the version the call was made for (issue 54): it was not offered to one.

    Its code travels by value, made by one Python (a function of ``__main__``,
    a lambda, a closure: bytecode of one minor version), or it names a code
    version (a build id) that no member runs. The message names both sides
    and the fix. Retrying can succeed once a matching worker joins (a rolling
    deploy's new workers, or the old ones a pinned job waits for).
    """


class AdmissionRejected(PoolError):
    """The pool refused the call: its admission ceiling or queue is full.

    Nothing was queued or sent. Retrying after ``retry_after`` seconds (an
    estimate of when a place frees up) can succeed; an HTTP service maps
    this to 429 with a ``Retry-After`` header.

    Attributes:
        retry_after: Suggested seconds to wait before retrying.
    """

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[type, tuple[str, float]]:
        return (type(self), (str(self), self.retry_after))


class Deadlock(PoolError):
    """The call would wait forever: it needs a slot its own caller holds.

    For example a routine that, inside a queue of concurrency 1, calls a
    routine in the same queue. Retrying cannot succeed; change the limits
    or the call graph.
    """


class WorkflowHalted(PoolError):
    """The call never ran: an earlier call of its workflow failed, and asked to halt it.

    Raised for calls waiting behind a call made with ``halt_on_error=True``
    when that call fails; its error is the ``__cause__``. Calls made after
    the workflow's queue emptied run normally, so resubmitting can succeed.
    """


class SerializationError(PoolError, TypeError):
    """A value could not be pickled or unpickled to cross a process boundary.

    Raised at the call site for an argument (nothing is sent), or at the
    caller for a result or exception the worker could not send back. The
    message names the value and the reason. Retrying cannot succeed.
    """


class PicklingError(SerializationError, pickle.PicklingError):
    """A value could not be pickled (an argument, at the call site; a result, on the worker).

    Both a `SerializationError` (what leakypool's users catch) and a
    ``pickle.PicklingError`` (what ``concurrent.futures`` code catches: the
    standard library's pools raise one). The original error is the cause.
    Retrying cannot succeed.
    """


class StoreError(PoolError):
    """The job store could not do what was asked: the disk is full, the database is gone or locked.

    Nothing was half-written: the operation's transaction was rolled back.
    A retry can succeed once the cause is fixed (free disk space, a
    database server back up).
    """


class ProvisionError(PoolError):
    """A provisioner could not start a worker: its command failed, the orchestrator's API refused.

    Retrying can succeed: the pool asks again after a back-off, and the
    work waiting keeps waiting (until its dispatch deadline).
    """


class ConfigError(PoolError, ValueError):
    """A setting has a bad value; the message names it, the expectation and the value.

    Raised when the object is built (or a worker starts), never on first use.
    """


class RemoteTraceback(Exception):
    """The worker-side traceback of a routine's exception, as text.

    Attached as ``__cause__`` of the re-raised exception, so it prints
    above the local traceback, as in ``concurrent.futures``.
    """

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f"\n\n[worker traceback]\n{self.tb}"


class _AfterImport:
    """A ``sys.meta_path`` entry that runs ``then(module)`` once, when ``name`` has been imported.

    Why: ``concurrent.futures.process`` imports ``multiprocessing``, 25 ms
    per process for one base class, and until code imports it, no
    ``except BrokenProcessPool`` can exist. It finds nothing itself: it
    asks the finders after it and gives the spec it gets a loader of its
    own around the real one (never patching the real one: a zip or frozen
    importer serves many modules). It stays in ``sys.meta_path`` after
    (removing it could make another thread's import skip a finder), and
    answers None to every name then.
    """

    def __init__(self, name: str, then: Callable[[ModuleType], None]) -> None:
        self.name = name
        self.then: Callable[[ModuleType], None] | None = then

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self.then is None:
            return None
        for finder in list(sys.meta_path):
            find = None if finder is self else getattr(finder, "find_spec", None)
            spec = None if find is None else find(fullname, path, target)
            if spec is not None:
                if hasattr(spec.loader, "exec_module"):
                    spec.loader = _Followed(spec.loader, self)
                return spec
        return None

    def fired(self, module: ModuleType) -> None:
        then, self.then = self.then, None
        if then is not None and sys.modules.get(self.name) is module:
            then(module)


class _Followed:
    """A module's own loader, and `_AfterImport.fired` once it has run; anything else asked of it goes to the real one."""

    def __init__(self, loader: Any, hook: _AfterImport) -> None:
        self._loader = loader
        self._hook = hook

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._hook.fired(module)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package ... (tracebacks, inspect)
        if name == "_loader":
            raise AttributeError(name)  # (not set yet: a copy being made)
        return getattr(self._loader, name)


def _broken_process_pool(errors: tuple[type[BaseException], ...], module: ModuleType) -> None:
    """Give ``errors`` ``BrokenProcessPool`` (``module``'s subclass of `BrokenExecutor`) as their base in its place."""
    base = getattr(module, "BrokenProcessPool", None)
    for error in errors:
        try:
            error.__bases__ = tuple(base if b is BrokenExecutor and base is not None else b for b in error.__bases__)
        except TypeError as exc:  # a layout CPython would not mix: the error stays a BrokenExecutor
            warnings.warn(f"{error.__name__} is not a BrokenProcessPool here: {exc}", PoolWarning, stacklevel=1)


class PoolWarning(UserWarning):
    """Base of every warning leakypool issues."""


_adopt = functools.partial(_broken_process_pool, (WorkerBroken, WorkerInitError))
if "concurrent.futures.process" in sys.modules:
    _adopt(sys.modules["concurrent.futures.process"])
else:
    sys.meta_path.insert(0, _AfterImport("concurrent.futures.process", _adopt))
