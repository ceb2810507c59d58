"""The backpressure protocol: what a hook sees (`BackpressureContext`) and what it is (`BackpressureLike`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True, slots=True)
class BackpressureContext:
    """What a hook sees of the worker when a task arrives.

    Attributes:
        active_task_count: Tasks in flight on this worker now, not counting
            the incoming one.
        task: The incoming task. In leakypool, a description of the call
            (``id``, ``name``, ``generator``, ``limits``), not its arguments,
            which are not decoded before the task is accepted.
        memory_fraction: The host's memory in use, as a fraction of its
            total (None where the pool does not measure it, e.g. in wool).
        memory_bytes: The worker process's resident memory (or None).
        loop_lag_s: How late the worker's loop ran a timer lately, or how
            long user code has held it so far (a pool's own workers run
            routines on that loop), in seconds (or None).
        recent_latencies_s: Durations of the worker's latest tasks, oldest
            first (empty where not measured).

    The fields after ``task`` are optional, so a hook that reads only
    ``active_task_count`` works unchanged in a pool that fills only the
    first two (wool's).
    """

    active_task_count: int
    task: Any
    memory_fraction: float | None = None
    memory_bytes: int | None = None
    loop_lag_s: float | None = None
    recent_latencies_s: tuple[float, ...] = ()


@runtime_checkable
class BackpressureLike(Protocol):
    """A hook deciding whether a worker rejects an incoming task.

    Called with a `BackpressureContext`; returns ``True`` to REJECT the
    task, ``False`` to accept it, either directly or as an awaitable. It
    MUST be cheap and MUST NOT block: it runs on the worker's loop, before
    the task is acknowledged, or (in leakypool, while a routine holds that
    loop) on a watch thread answering for it, so it MUST NOT wait for
    anything only the loop or a routine would do. It MUST survive pickling
    if a pool is to ship it to the workers it spawns.
    """

    def __call__(self, ctx: BackpressureContext) -> bool | Awaitable[bool]:
        """Return True to reject the task described by ``ctx``."""
        ...
