"""The calls an executor sends: one routine for a submitted callable, one for a chunk of ``map``.

Every callable an executor is given runs through `_apply` (`_apply_chunk`
for a chunk of ``map``), so ``fn`` crosses as an argument: a plain function,
a lambda or closure (cloudpickle, by value), an ``async def`` function
(awaited on the worker) or a `pool.Routine` (its function is called). ``fn``
travels pickled once (`Shipped`): ``map`` pickles it once for all its chunks
and a worker unpickles each distinct one once.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import pickle
from collections.abc import Callable
from typing import Any, Final

import cloudpickle

from .._call import CallRecord
from .._routine import BoundRoutine, Routine, routine
from .._transport import wire
from ._map import Chunk

CACHE_BYTES: Final[int] = 8 << 20
"""What a worker keeps of the callables it was sent, in all (their pickles' bytes): so a map's ``fn`` (a
function of ``__main__``, sent by value, costly to load each time) loads once, and a function that captured
large data is not kept past its call (the standard library keeps nothing)."""

CACHE_ENTRY_BYTES: Final[int] = 1 << 20
"""A callable whose pickle is larger than this is loaded for its call and never kept."""


class Shipped:
    """``fn`` pickled once (``map`` pickles it once for all its chunks); on the worker it loads as ``fn``, cached.

    ``keep=False``: a callable made for one call that carries its own data
    (a joblib batch holds its items): the worker loads it for that call and
    keeps nothing. The cache's bound counts pickles' bytes, and such a
    pickle loads into many times its size.
    """

    __slots__ = ("blob", "interpreter", "keep", "mains", "name")

    def __init__(self, fn: Callable[..., Any], *, keep: bool = True) -> None:
        self.name = name_of(fn)  # what its calls are called in errors, logs and metrics (not `_apply`)
        self.blob = wire.dumps(fn, what=f"the callable {self.name}")
        self.mains = self.blob.count(_MAIN)
        self.interpreter = wire.interpreter_of(self.blob)  # a lambda, a closure: code only its Python may load
        self.keep = keep

    def __reduce__(self) -> tuple[Any, ...]:
        if len(self.blob) > CACHE_ENTRY_BYTES:  # never cached: its buffer may cross out of band (no copy)
            return _load, (pickle.PickleBuffer(self.blob), False)
        return (_load, (self.blob,)) if self.keep else (_load, (self.blob, False))


_MAIN: Final[bytes] = b"__main__"


def task_for(runner: Routine[..., Any], args: tuple[Any, ...]) -> CallRecord:
    """``runner``'s task for ``args`` (a `Shipped` first): by plain pickle when that is what cloudpickle would send.

    The routine's own packing sends anything whose pickle mentions
    ``__main__`` through cloudpickle (~40 us a call); a shipped function
    from ``__main__`` always does, inside its blob, which is already
    cloudpickle's output. Plain pickle is right when no ``__main__`` shows
    outside that blob and no module is registered to go by value.

    Raises:
        SerializationError: an argument cannot be pickled.
    """
    shipped = args[0]
    task = runner.task((), {})  # the routine's fields (computed once) and no arguments yet
    task.name = shipped.name  # errors name the user's function: "crunch() raised", not "_apply() raised"
    try:
        data = pickle.dumps((args, {}), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001  # a lambda or closure among the arguments: cloudpickle's job, below
        data = b""
    if (
        data
        and len(data) < LARGE_ARGS_BYTES
        and data.count(_MAIN) == shipped.mains
        and not cloudpickle.list_registry_pickle_by_value()
    ):
        task.args = data
    else:  # (large: its big buffers, the shipped callable's included, cross out of band where they can)
        task.args = wire.pack_args(task.name, args, {})
    task.interpreter = shipped.interpreter or wire.interpreter_of(task.args)
    return task


LARGE_ARGS_BYTES: Final[int] = 512 << 10
"""Arguments (the callable included) that pickle at least this large go through `wire.pack_args`, whose large
buffers cross in a memory region beside the stream: the worker maps them instead of reading and copying them
through the stream, and they are let go as the call ends."""


_LOADED: dict[bytes, Callable[..., Any]] = {}
"""Callables loaded on this worker, by their pickle, the most recently used last (see `CACHE_BYTES`)."""
_loaded_bytes = 0


def _load(blob: bytes | memoryview, keep: bool = True) -> Callable[..., Any]:
    """On the worker: the callable ``blob`` is the pickle of; a small one is kept (least recently used goes first).

    ``keep=False``: loaded for its call only (see `Shipped`); a large blob
    may come as a view of the region it crossed in.
    """
    global _loaded_bytes
    if not keep or len(blob) > CACHE_ENTRY_BYTES or not isinstance(blob, bytes):
        loaded: Callable[..., Any] = wire.loads(blob, what="a submitted callable")
        return loaded
    fn = _LOADED.pop(blob, None)
    if fn is None:
        fn = wire.loads(blob, what="a submitted callable")
        _loaded_bytes += len(blob)
        while _LOADED and _loaded_bytes > CACHE_BYTES:
            oldest = next(iter(_LOADED))
            del _LOADED[oldest]
            _loaded_bytes -= len(oldest)
    _LOADED[blob] = fn
    return fn


def runner_for(runner: Routine[..., Any], fn: Any) -> Routine[..., Any]:
    """``runner`` with ``fn``'s call options when ``fn`` is a `pool.Routine`: its timeout, queue ... hold through
    ``submit`` and ``map`` as through a call (the options of a job, such as ``retries``, do not apply)."""
    base = fn.routine if isinstance(fn, BoundRoutine) else fn
    if not isinstance(base, Routine):
        return runner
    o = base.call_options
    return runner.options(
        timeout=o.timeout,
        queue=o.queue,
        key=o.key,
        workflow=o.workflow,
        halt_on_error=o.halt_on_error,
        dispatch_deadline=o.dispatch_deadline,
        priority=o.priority,
        prefetch=o.prefetch,
    )


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function a `Routine` (or a bound one) wraps; any other callable as it is."""
    if isinstance(fn, BoundRoutine):
        return functools.partial(fn.routine.__wrapped__, fn.instance)
    if isinstance(fn, Routine):
        return fn.__wrapped__
    return fn


@routine
def _apply(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one submitted call on a worker (a plain call: one at a time there): ``fn(*args, **kwargs)``.

    A coroutine it returns (an ``async def`` fn) runs to its end on an event loop of its own.
    """
    return _settled(_unwrap(fn)(*args, **kwargs))


@routine
def _apply_chunk(fn: Callable[..., Any], chunk: Chunk) -> tuple[list[Any], tuple[bytes, str] | None]:
    """Run one chunk of ``map`` on a worker: its values, and the error at the first item that raised (packed)."""
    fn = _unwrap(fn)
    values: list[Any] = []
    for args in chunk:
        try:
            value = _settled(fn(*args))
        except Exception as exc:  # noqa: BLE001  # fn's own error, sent back packed: the values before it still reach the caller
            return values, wire.pack_exception(exc, name_of(fn))
        values.append(value)
    return values, None


def _settled(value: Any) -> Any:
    """``value``, or what it returns if it is a coroutine (run on an event loop of its own, on this thread)."""
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
