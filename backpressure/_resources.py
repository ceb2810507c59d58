"""Hooks that read the worker's resources: memory, recent task latency, event-loop lag; and their composition.

Each rejects (True) only on a signal it has: a context without it (a pool
that does not measure it, such as wool's) gets False, so these hooks never
stop a pool that cannot feed them. Each holds a few numbers and nothing
else, so it pickles and compares by value.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from ._protocol import BackpressureContext, BackpressureLike


def _fraction(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{what}: expected a fraction in (0, 1], got {value!r}")
    return float(value)


def _seconds(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{what}: expected seconds > 0, got {value!r}")
    return float(value)


class _ByValue:
    """Equality, hashing and repr from ``__slots__`` (the hooks are values)."""

    __slots__: tuple[str, ...] = ()

    @classmethod
    def _fields(cls) -> tuple[str, ...]:
        return tuple(name for klass in reversed(cls.__mro__) for name in getattr(klass, "__slots__", ()))

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields())

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(repr(v) for v in self._key())})"

    def __getstate__(self) -> tuple[Any, ...]:
        return self._key()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self._fields(), state, strict=True):
            object.__setattr__(self, name, value)


class MemoryBackpressure(_ByValue):
    """Reject while the host's memory in use is at least ``max_fraction`` of its total.

    Args:
        max_fraction: In (0, 1]; e.g. 0.8 rejects at 80% in use.

    Raises:
        ValueError: not a fraction in (0, 1].
    """

    __slots__ = ("max_fraction",)

    def __init__(self, max_fraction: float) -> None:
        self.max_fraction: float = _fraction(max_fraction, "max_fraction")

    def __call__(self, ctx: BackpressureContext) -> bool:
        used = getattr(ctx, "memory_fraction", None)
        return used is not None and used >= self.max_fraction


class LatencyBackpressure(_ByValue):
    """Reject while the p99 of the worker's last ``window`` task durations exceeds ``p99_s``.

    Args:
        p99_s: Seconds; the 99th percentile that is still fine.
        window: Recent tasks considered (at least 1); fewer than
            ``window`` finished tasks: no opinion yet (accept).

    Raises:
        ValueError: ``p99_s`` is not > 0, or ``window`` is not an int >= 1.
    """

    __slots__ = ("p99_s", "window")

    def __init__(self, p99_s: float, window: int = 100) -> None:
        self.p99_s: float = _seconds(p99_s, "p99_s")
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise ValueError(f"window: expected an int >= 1, got {window!r}")
        self.window: int = window

    def __call__(self, ctx: BackpressureContext) -> bool:
        latencies = getattr(ctx, "recent_latencies_s", ())
        if len(latencies) < self.window:
            return False
        return p99(latencies[-self.window :]) > self.p99_s


class LoopLagBackpressure(_ByValue):
    """Reject while the worker's loop runs timers ``max_lag_s`` late or more, or a routine has held it that long (it is starved).

    Raises:
        ValueError: ``max_lag_s`` is not > 0.
    """

    __slots__ = ("max_lag_s",)

    def __init__(self, max_lag_s: float) -> None:
        self.max_lag_s: float = _seconds(max_lag_s, "max_lag_s")

    def __call__(self, ctx: BackpressureContext) -> bool:
        lag = getattr(ctx, "loop_lag_s", None)
        return lag is not None and lag >= self.max_lag_s


class _Composite(_ByValue):
    """Hooks combined by a rule over their verdicts."""

    __slots__ = ("hooks",)

    @staticmethod
    def _rule(verdicts: Iterable[object]) -> bool:
        """The combined verdict (`AnyOf`: any; `AllOf`: all)."""
        return any(verdicts)

    def __init__(self, *hooks: BackpressureLike) -> None:
        _check_hooks(hooks)
        self.hooks: tuple[BackpressureLike, ...] = tuple(hooks)

    def __call__(self, ctx: BackpressureContext) -> bool | Awaitable[bool]:
        return _combine(self.hooks, ctx, type(self)._rule)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.hooks))})"


class AnyOf(_Composite):
    """Reject when any of ``hooks`` rejects (e.g. a task cap OR memory pressure).

    Hooks may be sync or async; if one returns an awaitable, so does this.
    """

    __slots__ = ()  # the rule: `_Composite`'s own, any


class AllOf(_Composite):
    """Reject only when every one of ``hooks`` rejects (sync or async, as `AnyOf`)."""

    __slots__ = ()

    @staticmethod
    def _rule(verdicts: Iterable[object]) -> bool:
        return all(verdicts)


def _check_hooks(hooks: tuple[object, ...]) -> None:
    if not hooks:
        raise ValueError("expected at least one hook")
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"expected backpressure hooks (callables), got {hook!r}")


def _combine(
    hooks: tuple[BackpressureLike, ...], ctx: BackpressureContext, rule: Callable[[Iterable[bool]], bool]
) -> bool | Awaitable[bool]:
    verdicts = [hook(ctx) for hook in hooks]
    if not any(inspect.isawaitable(v) for v in verdicts):
        return rule(bool(v) for v in verdicts)

    async def settle() -> bool:
        return rule([bool(await v) if inspect.isawaitable(v) else bool(v) for v in verdicts])

    return settle()


def p99(samples: Sequence[float]) -> float:
    """The 99th percentile (nearest rank) of ``samples`` (non-empty)."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]
