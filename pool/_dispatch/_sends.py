"""Driving a balancer without awaiting it: the pick of a plain call the pool sends without waiting for its answer.

Plain calls need no round trip to be placed: the pool knows each worker's
places (`PlainSlots`). So the admission queue sends one, marks the place
taken and goes on to the next call at once, instead of awaiting each
worker's Accept (which made placement serial: one call per round trip,
whatever the number of workers). The balancer's generator is stepped by
hand: ``anext`` for the candidate, ``asend(uid)`` as the call leaves. The
built-in balancers never await; one that does raises `Suspended`, and its
pool places plain calls the awaited way (`Placement.place`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from balancer import LoadBalancerLike

from .._call._calls import rejection
from .._call._task import Task
from .._errors import WorkerBroken, WorkerRejected
from .._transport._outgoing import QUEUED, OutgoingCall
from .._transport._proto import leakypool_pb2 as pb
from .._transport._rpc import TRANSIENT_CODES


class Suspended(Exception):
    """The balancer awaited something: it cannot be driven without a loop turn."""


def _step(awaitable: Awaitable[Any]) -> Any:
    """Run ``awaitable`` (a step of an async generator) to its end without a loop; its value."""
    coro = awaitable.__await__()
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    coro.close()
    raise Suspended


def pick(
    balancer: LoadBalancerLike, task: Task, context: Any, member: Callable[[uuid.UUID], object | None]
) -> uuid.UUID | None:
    """The first worker ``balancer`` offers for ``task`` over ``context`` that is still a member; None if none.

    Raises:
        Suspended: the balancer awaits (the caller falls back to awaiting it).
    """
    first = getattr(balancer, "first", None)  # the built-ins say it without a generator (~1 µs, not ~20)
    if first is not None:
        uid: uuid.UUID | None = first(task, context=context)
        return uid if uid is None or member(uid) is not None else _by_generator(balancer, task, context, member)
    return _by_generator(balancer, task, context, member)


def _by_generator(
    balancer: LoadBalancerLike, task: Task, context: Any, member: Callable[[uuid.UUID], object | None]
) -> uuid.UUID | None:
    delegation = balancer.delegate(task, context=context)
    try:
        uid = _step(delegation.asend(None))
        while member(uid) is None:  # left the pool since the balancer looked
            uid = _step(delegation.asend(None))
        try:
            _step(delegation.asend(uid))
        except StopAsyncIteration:
            return uid
        raise RuntimeError(f"{balancer!r} offered another worker after a success")
    except StopAsyncIteration:
        return None
    finally:
        try:
            _step(delegation.aclose())
        except (Suspended, RuntimeError):  # (an awaiting balancer's generator, left mid-step: let go)
            pass


class Sender(Protocol):
    """What `Sends` needs of the pool's `Placement`."""

    def send_plain(self, task: Task) -> tuple[uuid.UUID, int, OutgoingCall] | None: ...

    def refused(self, uid: uuid.UUID, exc: WorkerRejected | WorkerBroken, epoch: int) -> None: ...

    def queued(self, uid: uuid.UUID) -> None: ...


class Sends:
    """The plain calls an admission queue sends without awaiting their answer, and what each answer does.

    Args:
        placement: Picks the worker and sends (`Placement.send_plain`).
        back: Puts a waiter whose call was turned away back in its place in the queue.
        closed: Why the pool closed, once it has (a call turned away then ends with it).
    """

    def __init__(
        self, placement: Sender, back: Callable[[Any], None], closed: Callable[[], BaseException | None]
    ) -> None:
        self._placement = placement
        self._back = back
        self._closed = closed
        self.sync = True  # False once the balancer awaited: plain calls are then placed the awaited way

    def send(self, waiter: Any) -> bool:
        """Send ``waiter``'s call where a place is, its answer to come to `_answered`; False if no place is."""
        try:
            placed = self._placement.send_plain(waiter.ticket.task)
        except Suspended:
            self.sync = False
            return False
        if placed is None:
            return False
        uid, epoch, call = placed
        call.first = lambda call, item: self._answered(waiter, uid, epoch, call, item)
        return True

    def _answered(
        self, waiter: Any, uid: uuid.UUID, epoch: int, call: OutgoingCall, item: pb.Frame | BaseException
    ) -> bool:
        """The first answer to a call `send` sent: accepted (its caller gets the call), or back in its place.

        Returns True to hand ``item`` on to the call's reader (an outcome that
        overtook its Accept, or the end of a stream the call had left on).
        """
        served: asyncio.Future[OutgoingCall] = waiter.served
        if isinstance(item, pb.Frame) and not item.HasField("reject"):
            if not served.done():
                served.set_result(call)
            elif not call.finished:
                call.cancel()  # its caller gave up while it was on its way
            if call.state == QUEUED:
                self._placement.queued(uid)  # a worker that went idle before this Accept came may ask for it
            return not item.HasField("accept")
        if isinstance(item, WorkerBroken) and item.code in TRANSIENT_CODES and call.sent:
            if not served.done():  # the worker went after the call left: it may have started it (see open_call)
                served.set_result(call)
            return True
        exc: WorkerRejected | WorkerBroken
        if isinstance(item, pb.Frame):
            exc = rejection(item.reject, call.session.label, call.name)
        elif isinstance(item, WorkerBroken) and item.code in TRANSIENT_CODES:
            exc = WorkerRejected(str(item), item.code)  # it never left: the worker is unreachable, for now
        else:
            exc = item if isinstance(item, (WorkerRejected, WorkerBroken)) else WorkerBroken(str(item))
        self._placement.refused(uid, exc, epoch)
        closed = self._closed()
        if not served.done():
            if closed is not None:
                served.set_exception(closed)
            else:
                self._back(waiter)
        return False
