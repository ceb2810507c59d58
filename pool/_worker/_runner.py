"""Where shipped routines run: on the main loop (`_overrun`), or on a loop thread of their own.

Plain ``def`` routines never come here: they run in the worker's line, on a thread of its own (`_plain`).

The service admits a call and hands it here: at once on the main loop
(a pool's own worker), or through a `Hop` to the routine loop (a worker
reached over gRPC). The runner unpickles the routine and its arguments, runs
it (driving an async generator one Step at a time), pickles the outcome and
hands that back. Everything user-defined runs inside ``user`` (on the main
loop: with the guard released, so the watch thread can answer for the loop).
A routine that calls another routine sends that call back up its own stream
(`_upstream.Upstream`), and while it waits it is *parked*: it stops counting
against the worker's backpressure.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, Protocol

from .._call import reset_dispatcher, set_dispatcher
from .._transport import leakypool_pb2 as pb
from .._transport import wire
from . import _trace
from ._hosted import CANCELLED, STOP, Host, Hosted, Outcome
from ._upstream import Carry, Upstream

_log = logging.getLogger("leakypool.worker")


class Post(Protocol):
    """Runs a callback on a loop (a `_threads.Hop`, or `_overrun.Here`)."""

    def post(self, fn: Callable[..., Any], *args: Any) -> None: ...


class RoutineRunner:
    """Runs hosted calls; reports back through ``to_io``.

    Args:
        host: The service.
        to_io: Onto the loop the streams live on.
        to_routines: Onto the loop routines run on (the same one, `_overrun.Here`, on the main loop).
        carry: How a nested call reaches the stream (`_upstream.bridge` or `_upstream.in_task`).
        user: Wraps each awaitable that runs user code (`_overrun.unlocked` where the
            routines share the main loop); None awaits it as it is.
    """

    def __init__(
        self,
        host: Host,
        to_io: Post,
        to_routines: Post,
        carry: Carry,
        user: Callable[[Coroutine[Any, Any, Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self._host = host
        self._to_io = to_io
        self._to_routines = to_routines
        self._carry = carry
        self._user = user or _as_is

    def start(self, hosted: Hosted) -> None:
        """Run ``hosted`` (call where the streams live, or from the watch thread)."""
        self._to_routines.post(self._start_routine, hosted)

    def step(self, hosted: Hosted, step: pb.Step) -> None:
        """Pass a Step on to ``hosted``'s generator (call where the streams live, or from the watch thread)."""
        if hosted.steps is not None:
            self._to_routines.post(hosted.steps.put_nowait, step)

    def cancel(self, hosted: Hosted) -> None:
        """Cancel ``hosted`` wherever it is (call where the streams live, or from the watch thread)."""
        hosted.cancelled = True
        self._to_routines.post(self._cancel_runner, hosted)

    def _start_routine(self, hosted: Hosted) -> None:
        if hosted.cancelled:  # cancelled before it could start (from the watch thread, say): it never runs
            self._to_io.post(self._host.finish, hosted, CANCELLED)
            return
        loop = asyncio.get_running_loop()
        hosted.runner = loop.create_task(self._run(hosted))
        if not hosted.task.generator:
            loop.call_soon(self._first_step_done, hosted)  # runs right after the task's first step

    def _first_step_done(self, hosted: Hosted) -> None:
        if hosted.runner is not None and not hosted.runner.done():
            self._to_io.post(self._host.started, hosted)

    def _cancel_runner(self, hosted: Hosted) -> None:
        runner = hosted.runner
        if runner is not None and runner.cancel() and not hosted.entered:
            # Cancelled before its first step: its coroutine never runs (not even `_run`'s try block), so its
            # outcome is reported here, or the call would stay in flight forever.
            self._to_io.post(self._host.finish, hosted, CANCELLED)

    async def _run(self, hosted: Hosted) -> None:
        hosted.entered = True
        token = set_dispatcher(Upstream(self._host, hosted, self._carry))
        # None unless this process traces (OpenTelemetry); not even a call when OpenTelemetry is not loaded
        span = _trace.start(hosted.task) if "opentelemetry.trace" in sys.modules else None
        try:
            if hosted.task.generator:
                outcome = await self._drive(hosted)
            else:
                outcome = await self._user(_call(hosted))
        except asyncio.CancelledError:  # a generator cancelled between its steps
            outcome = CANCELLED
        finally:
            reset_dispatcher(token)
        if span is not None:
            _trace.end(span, outcome[0], outcome[2])
        self._to_io.post(self._host.finish, hosted, outcome)

    async def _drive(self, hosted: Hosted) -> Outcome:
        """Advance an async generator one step per Step frame, until it ends."""
        name = hosted.task.name
        agen, failed = await self._user(_open(hosted))
        if failed is not None:
            return failed
        try:
            while True:
                step = await hosted.steps.get()  # type: ignore[union-attr]  # a generator's call has its queue
                outcome = await self._user(_advance(agen, step, name))
                if outcome[0] != pb.Outcome.YIELD:
                    return outcome
                self._to_io.post(self._host.send, hosted, outcome)
        finally:
            await self._user(_close(agen, name))


async def _call(hosted: Hosted) -> Outcome:
    """A coroutine routine's whole run, user code only: unpickle, run, pickle; its outcome."""
    name = hosted.task.name
    try:
        value = await _invoke(hosted)
        return (pb.Outcome.RETURN, wire.dumps(value, what=f"the result of {name}()", oob=True), "")
    except asyncio.CancelledError:
        return CANCELLED
    except BaseException as exc:  # noqa: BLE001 - the routine's exception, whatever it is, is its outcome
        return (pb.Outcome.RAISE, *wire.pack_exception(exc, name))


async def _open(hosted: Hosted) -> tuple[Any, Outcome | None]:
    """A generator routine's generator, or (None, the outcome of failing to make it)."""
    try:
        return _invoke(hosted), None
    except BaseException as exc:  # noqa: BLE001 - the routine's exception, whatever it is, is its outcome
        return None, (pb.Outcome.RAISE, *wire.pack_exception(exc, hosted.task.name))


def _invoke(hosted: Hosted) -> Any:
    """Call the routine with its arguments (both unpickled here): its coroutine or async generator."""
    fn = hosted.code.resolve()
    args, kwargs = wire.unpack_args(hosted.task.args, hosted.task.name)
    return fn(*args, **kwargs)


async def _advance(agen: AsyncGenerator[Any, Any], step: pb.Step, name: str) -> Outcome:
    """One Step of a generator routine, user code only: YIELD with its value, or how it ended."""
    try:
        if step.kind == pb.Step.NEXT:
            value = await agen.__anext__()
        elif step.kind == pb.Step.SEND:
            value = await agen.asend(wire.loads(step.value, what=f"the value sent to {name}()"))
        elif step.kind == pb.Step.THROW:
            value = await agen.athrow(wire.loads(step.value, what=f"the exception thrown into {name}()"))
        else:
            await agen.aclose()
            return STOP
        return (pb.Outcome.YIELD, wire.dumps(value, what=f"a value yielded by {name}()", oob=True), "")
    except StopAsyncIteration:
        return STOP
    except asyncio.CancelledError:
        return CANCELLED
    except BaseException as exc:  # noqa: BLE001 - the routine's exception, whatever it is, is its outcome
        return (pb.Outcome.RAISE, *wire.pack_exception(exc, name))


async def _close(agen: AsyncGenerator[Any, Any], name: str) -> None:
    try:
        await agen.aclose()
    except (Exception, asyncio.CancelledError):  # noqa: BLE001 - closing a user generator: logged, the call already has its outcome
        _log.debug("closing %s() raised", name, exc_info=True)


def _as_is(awaitable: Coroutine[Any, Any, Any]) -> Awaitable[Any]:
    return awaitable
