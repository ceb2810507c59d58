"""TaskCountBackpressure: cap the tasks a worker runs at once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from ._protocol import BackpressureContext

ENV_VAR: Final[str] = "LEAKYPOOL_MAX_CONCURRENT_TASKS"
"""The variable `TaskCountBackpressure.from_env` reads."""

DEFAULT_THRESHOLD: Final[int] = 1
"""`from_env`'s threshold when the variable is unset: one task per worker."""


class TaskCountBackpressure:
    """Reject a task when the worker already runs ``threshold`` tasks.

    Returns True (REJECT, as every backpressure hook does) when
    ``ctx.active_task_count >= threshold``. A threshold of 0 disables it:
    it never rejects.

    It holds one int and nothing else, so it survives pickle and
    cloudpickle round trips with its behaviour intact, and equal
    thresholds make equal hooks.

    Args:
        threshold: Tasks a worker may run at once; 0 for no limit.

    Raises:
        TypeError: ``threshold`` is not an int (bools are refused too).
        ValueError: ``threshold`` is negative.
    """

    __slots__ = ("_threshold",)

    def __init__(self, threshold: int) -> None:
        self._threshold = _validate(threshold, what="threshold")

    @property
    def threshold(self) -> int:
        """Tasks a worker may run at once; 0 means no limit."""
        return self._threshold

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> TaskCountBackpressure:
        """Build from ``LEAKYPOOL_MAX_CONCURRENT_TASKS`` (default 1).

        Raises:
            ValueError: The variable is not an integer >= 0; the message
                names the variable and the value.
        """
        raw = environ.get(ENV_VAR)
        if raw is None or raw.strip() == "":
            return cls(DEFAULT_THRESHOLD)
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"{ENV_VAR}: expected an integer >= 0, got {raw!r}") from None
        if value < 0:
            raise ValueError(f"{ENV_VAR}: expected an integer >= 0, got {raw!r}")
        return cls(value)

    def __call__(self, ctx: BackpressureContext) -> bool:
        """Return True (reject) when ``ctx.active_task_count >= threshold``."""
        return self._threshold > 0 and ctx.active_task_count >= self._threshold

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (type(self), (self._threshold,))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._threshold == other._threshold

    def __hash__(self) -> int:
        return hash((type(self), self._threshold))

    def __repr__(self) -> str:
        return f"TaskCountBackpressure({self._threshold})"


def _validate(threshold: object, *, what: str) -> int:
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise TypeError(f"{what}: expected an int >= 0, got {threshold!r}")
    if threshold < 0:
        raise ValueError(f"{what}: expected an int >= 0, got {threshold!r}")
    return threshold
