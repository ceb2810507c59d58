"""Nested dispatch, worker side: a routine running here calls another routine.

The call travels back up the stream that brought the running task (an
even-numbered call), the dispatcher runs it through its pool, and the
outcome comes back down. Where the stream lives on the gRPC loop and the
calling routine on the routine loop, every step is carried across
(`bridge`); where both share the main loop, each step runs as a task of its
own (`in_task`), outside the routine's user code (`_overrun.unlocked`).
While it waits, the calling task is parked (it stops counting against the
worker's backpressure).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from .._call import CallRecord, RemoteGenerator, call_routine, open_call
from .._transport import OutgoingCall
from ._hosted import Host, Hosted
from ._trace import outgoing


class Upstream:
    """Where a routine running here sends the routines it calls: its own dispatcher.

    Args:
        host: The worker service.
        hosted: The calling routine's call.
        carry: Runs a step where the stream lives (`bridge` to the I/O
            loop, or `in_task` on the same loop).
    """

    def __init__(self, host: Host, hosted: Hosted, carry: Carry) -> None:
        self._carry = carry
        self._host = host
        self._hosted = hosted
        self._session = hosted.session
        self._parent = hosted.id

    def call(self, task: CallRecord) -> Any:
        task.parent = self._parent
        task.traceparent = outgoing(self._hosted.task.traceparent)
        return self._carry(self._parked(call_routine(self, task)))

    def generator(self, task: CallRecord) -> BridgedGenerator:
        task.parent = self._parent
        task.traceparent = outgoing(self._hosted.task.traceparent)
        return BridgedGenerator(self._carry, RemoteGenerator(self, task), around=self._parked)

    async def _parked(self, waiting: Any) -> Any:
        """Await ``waiting`` (where the stream lives) with the calling task parked."""
        self._host.park(self._hosted)
        try:
            return await waiting
        finally:
            self._host.unpark(self._hosted)

    async def dispatch(self, task: CallRecord, parent: OutgoingCall | None = None) -> OutgoingCall:
        """Open the call on the stream back to the dispatcher (where the stream lives)."""
        return await open_call(self._session, task)


Carry = Callable[[Coroutine[Any, Any, Any]], Awaitable[Any]]
"""Runs a coroutine where the stream lives and awaits it from the calling routine."""


def bridge(loop: asyncio.AbstractEventLoop) -> Carry:
    """A `Carry` onto ``loop``, another thread's (cancelling the awaiting task cancels the coroutine too)."""

    async def carry(coro: Coroutine[Any, Any, Any]) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    return carry


async def in_task(coro: Coroutine[Any, Any, Any]) -> Any:
    """A `Carry` on this loop: ``coro`` runs as a task of its own, never inside the caller's user code.

    (The task is made directly, not through the loop's task factory, which
    would count it as the routine's own.) Cancelling the caller cancels it
    and raises at once, as `bridge` does: the nested call's own clean-up
    (telling its worker) goes on without holding the caller up.
    """
    task = asyncio.Task(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        raise


class BridgedGenerator:
    """A `RemoteGenerator` living where the stream does, driven from the calling routine.

    ``around`` wraps each step's awaitable (where the stream lives), e.g. to
    mark the calling task as waiting while the step runs.
    """

    def __init__(
        self,
        carry: Carry,
        inner: RemoteGenerator,
        around: Callable[[Awaitable[Any]], Coroutine[Any, Any, Any]] | None = None,
    ) -> None:
        self._carry = carry
        self._inner = inner
        self._around = around

    def __aiter__(self) -> BridgedGenerator:
        return self

    async def _run(self, step: Coroutine[Any, Any, Any]) -> Any:
        return await self._carry(self._around(step) if self._around else step)

    async def __anext__(self) -> Any:
        return await self._run(self._inner.__anext__())

    async def asend(self, value: Any) -> Any:
        """See `RemoteGenerator.asend`."""
        return await self._run(self._inner.asend(value))

    async def athrow(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """See `RemoteGenerator.athrow`."""
        thrown = self._inner.athrow(typ) if val is None and tb is None else self._inner.athrow(typ, val, tb)
        return await self._run(thrown)  # (the 3-argument form is deprecated for native generators: 3.12)

    async def aclose(self) -> None:
        """See `RemoteGenerator.aclose`."""
        await self._run(self._inner.aclose())
