"""`CallOptions`: what ``@pool.routine(...)`` and ``Routine.options(...)`` set, checked where it is set.

Kept apart from `_routine` (which dispatches calls): a bad option fails at
decoration or at ``options(...)``, with one line naming it.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any

from ._base._public import public
from ._dispatch._limits import Queue


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

    def __post_init__(self) -> None:
        self._check_call_options()
        self._check_job_options()
        check_schedule_options(self)

    def _check_job_options(self) -> None:
        deadline = self.dispatch_deadline
        if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, (int, float))):
            raise TypeError(f"dispatch_deadline: expected seconds > 0 or None, got {deadline!r}")
        if deadline is not None and not (deadline > 0 and math.isfinite(deadline)):
            raise ValueError(f"dispatch_deadline: expected seconds > 0 or None, got {deadline!r}")
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
        timeout = self.timeout
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise TypeError(f"timeout: expected seconds > 0 or None, got {timeout!r}")
        if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout: expected seconds > 0 or None, got {timeout!r}")
        if self.queue is not None and not isinstance(self.queue, Queue):
            raise TypeError(f"queue: expected a pool.Queue or None, got {self.queue!r}")
        for name in ("key", "workflow"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"{name}: expected a str, got {getattr(self, name)!r}")
        if self.key and self.queue is None:
            raise ValueError(f"key: a concurrency key needs a queue to apply to, got key={self.key!r} and no queue")
        if not isinstance(self.halt_on_error, bool):
            raise TypeError(f"halt_on_error: expected a bool, got {self.halt_on_error!r}")


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


public(CallOptions)
