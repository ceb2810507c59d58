"""Owned background tasks: every task a pool or a worker starts has an owner that ends it.

A fire-and-forget ``ensure_future`` can outlive its object, be garbage
collected while pending ("Task was destroyed but it is pending!"), or die
with an exception nobody sees. A `TaskOwner` is the small nursery each
long-lived object (a `WorkerPool`, a worker service) keeps instead: it
starts tasks, logs a crash with its traceback the moment it happens, and
on `aclose` cancels whatever still runs and waits for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

T = TypeVar("T")

CLOSE_TIMEOUT_S: Final[float] = 5.0
"""How long `TaskOwner.aclose` waits for cancelled tasks to finish unwinding."""


class TaskOwner:
    """The background tasks of one owner.

    Args:
        name: Names the owner in log lines.
        log: Where crashes are logged.
    """

    def __init__(self, name: str, log: logging.Logger) -> None:
        self._name = name
        self._log = log
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str | None = None) -> asyncio.Task[T]:
        """Start ``coro`` as a task this owner ends on `aclose`.

        Raises:
            RuntimeError: the owner is closed (the coroutine is closed, not run).
        """
        if self.closed:
            coro.close()
            raise RuntimeError(f"{self._name} is closed; cannot start {name or coro!r}")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._log.error("%s: background task %s crashed", self._name, task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Cancel every task still running and wait (at most ``timeout`` s) for them to end."""
        self.closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:
                self._log.error("%s: %d task(s) ignored cancellation: %s", self._name, len(pending), pending)
                return

    def __repr__(self) -> str:
        return f"<TaskOwner {self._name} [{len(self._tasks)} running]>"
