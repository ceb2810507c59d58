"""Where a routine call goes: the `Dispatcher` protocol, and the one current in this context.

Inside ``async with WorkerPool(...)`` the pool is current; on a worker, a
running routine's own stream back to the pool that sent it (nested
dispatch). Both sides set it here, so neither imports the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, Protocol

from .._errors import PoolClosed
from .._transport import OutgoingCall
from ._task import CallRecord


class Dispatches(Protocol):
    """What a call or a generator needs of its dispatcher: `Dispatcher.dispatch` alone."""

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """See `Dispatcher.dispatch`."""
        ...


class Dispatcher(Dispatches, Protocol):
    """Where routine calls go: the innermost `WorkerPool`, or inside a worker its upstream.

    `pool.routine` hands a call's task to `call` or `generator`; both end up
    in `dispatch`, which also serves calls relayed on behalf of workers.
    """

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """Get ``task`` accepted by a callee; ``parent`` is the call whose routine made it, if any.

        Raises:
            PoolError: why no callee took it (see `WorkerPool.dispatch`).
        """
        ...

    def call(self, task: CallRecord) -> Coroutine[Any, Any, Any]:
        """Run a coroutine routine's task; the coroutine returns its result."""
        ...

    def generator(self, task: CallRecord) -> AsyncIterator[Any]:
        """Run an async-generator routine's task; iterate for its values."""
        ...


_dispatcher: contextvars.ContextVar[Dispatcher | None] = contextvars.ContextVar("leakypool_dispatcher", default=None)

_open: dict[int, list[Dispatcher]] = {}
"""Pools open on each event loop (by id), innermost last: the fallback for tasks
that did not inherit the context of an ``async with`` (a web framework's request
handlers run in tasks started before the app's pool opened)."""


def current_dispatcher(name: str) -> Dispatcher:
    """Where a call made here goes. Raises `PoolClosed` when there is nowhere.

    The dispatcher of this context (the innermost ``async with WorkerPool``
    around the call, or a worker's upstream), else the pool most recently
    opened on this event loop that is still open.
    """
    dispatcher = _dispatcher.get()
    if dispatcher is None:
        try:
            opened = _open.get(id(asyncio.get_running_loop()))
        except RuntimeError:
            opened = None
        if not opened:
            raise PoolClosed(
                f"{name}() was called with no active WorkerPool; call it inside "
                "`async with pool.WorkerPool(...):` (or from a routine running on a worker)"
            )
        dispatcher = opened[-1]
    return dispatcher


def opened(dispatcher: Dispatcher) -> None:
    """Record ``dispatcher`` as open on the running loop (see `current_dispatcher`)."""
    _open.setdefault(id(asyncio.get_running_loop()), []).append(dispatcher)


def closed(dispatcher: Dispatcher) -> None:
    """Undo `opened`."""
    key = id(asyncio.get_running_loop())
    stack = _open.get(key, [])
    if dispatcher in stack:
        stack.remove(dispatcher)
    if not stack:
        _open.pop(key, None)


@contextlib.contextmanager
def dispatching_to(dispatcher: Dispatcher) -> Iterator[None]:
    """Within this block (and tasks it starts), routine calls go to ``dispatcher``."""
    token = _dispatcher.set(dispatcher)
    try:
        yield
    finally:
        _dispatcher.reset(token)


def set_dispatcher(dispatcher: Dispatcher | None) -> contextvars.Token[Dispatcher | None]:
    """Make ``dispatcher`` current in this context; returns the token to undo it."""
    return _dispatcher.set(dispatcher)


def reset_dispatcher(token: contextvars.Token[Dispatcher | None]) -> None:
    """Undo `set_dispatcher`."""
    _dispatcher.reset(token)
