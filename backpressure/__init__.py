"""Backpressure hooks: a worker's own say over how much work it takes.

A worker runs its hook on every incoming task before it acknowledges it.
The hook returns True to *reject* the task (apply backpressure) and False
to accept it; a rejection travels back to the dispatcher as gRPC
``RESOURCE_EXHAUSTED``, which is transient, so the dispatcher offers the
task to the next worker.

The True-means-reject convention looks backwards, and it is deliberate:
it is the shape of ``wool``'s ``BackpressureLike``, so a hook written for
either pool drops into the other unchanged. This package imports nothing
from ``pool``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "BackpressureContext",
    "BackpressureLike",
    "TaskCountBackpressure",
]


@dataclasses.dataclass(frozen=True, slots=True)
class BackpressureContext:
    """What a hook sees of the worker when a task arrives.

    Attributes:
        active_task_count: Tasks in flight on this worker now, not counting
            the incoming one.
        task: The incoming task. In leakypool, a description of the call
            (``id``, ``name``, ``generator``, ``limits``), not its arguments,
            which are not decoded before the task is accepted.
    """

    active_task_count: int
    task: Any


@runtime_checkable
class BackpressureLike(Protocol):
    """A hook deciding whether a worker rejects an incoming task.

    Called with a `BackpressureContext`; returns ``True`` to REJECT the
    task, ``False`` to accept it, either directly or as an awaitable. It
    MUST be cheap and MUST NOT block: it runs on the worker's I/O loop,
    before the task is acknowledged. It MUST survive pickling if a pool is
    to ship it to the workers it spawns.
    """

    def __call__(self, ctx: BackpressureContext) -> bool | Awaitable[bool]:
        """Return True to reject the task described by ``ctx``."""
        ...


from ._task_count import TaskCountBackpressure as TaskCountBackpressure  # noqa: E402

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("backpressure."):
        _obj.__module__ = "backpressure"
del _name, _obj
