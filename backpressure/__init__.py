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

from ._protocol import BackpressureContext as BackpressureContext
from ._protocol import BackpressureLike as BackpressureLike
from ._resources import AllOf as AllOf
from ._resources import AnyOf as AnyOf
from ._resources import LatencyBackpressure as LatencyBackpressure
from ._resources import LoopLagBackpressure as LoopLagBackpressure
from ._resources import MemoryBackpressure as MemoryBackpressure
from ._task_count import TaskCountBackpressure as TaskCountBackpressure

__all__ = [
    "AllOf",
    "AnyOf",
    "BackpressureContext",
    "BackpressureLike",
    "LatencyBackpressure",
    "LoopLagBackpressure",
    "MemoryBackpressure",
    "TaskCountBackpressure",
]

for _name in __all__:
    _obj = globals()[_name]
    if getattr(_obj, "__module__", "").startswith("backpressure."):
        _obj.__module__ = "backpressure"
del _name, _obj
