"""The worker's routine loop: where shipped routines run, on a thread of their own.

The I/O loop admits a call and hands it here (through a `Hop`); the
routine loop unpickles the routine and its arguments, runs it (driving an
async generator one Step at a time), pickles the outcome and hands that
back. A routine that calls another routine sends that call back up its own
stream (`_upstream.Upstream`), and while it waits it is *parked*: it stops counting
against the worker's backpressure.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from .._transport import _wire
from .._transport._dispatcher import reset_dispatcher, set_dispatcher
from .._transport._proto import leakypool_pb2 as pb
from . import _trace
from ._hosted import CANCELLED, STOP, Host, Hosted, Outcome
from ._threads import Hop
from ._upstream import Upstream

_log = logging.getLogger("leakypool.worker")

class RoutineRunner:
    """Runs hosted calls on the routine loop; reports back through ``to_io``.

    Args:
        host: The I/O side.
        io_loop: The I/O loop (nested calls are made there).
        to_io: Hop onto the I/O loop.
        to_routines: Hop onto the routine loop.
    """

    def __init__(self, host: Host, io_loop: asyncio.AbstractEventLoop, to_io: Hop, to_routines: Hop) -> None:
        self._host = host
        self._io_loop = io_loop
        self._to_io = to_io
        self._to_routines = to_routines

    def start(self, hosted: Hosted) -> None:
        """Run ``hosted`` (call from the I/O loop)."""
        self._to_routines.post(self._start_routine, hosted)

    def step(self, hosted: Hosted, step: pb.Step) -> None:
        """Pass a Step on to ``hosted``'s generator (call from the I/O loop)."""
        if hosted.steps is not None:
            self._to_routines.post(hosted.steps.put_nowait, step)

    def cancel(self, hosted: Hosted) -> None:
        """Cancel ``hosted`` wherever it is (call from the I/O loop)."""
        hosted.cancelled = True
        self._to_routines.post(_cancel_runner, hosted)

    def _start_routine(self, hosted: Hosted) -> None:
        loop = asyncio.get_running_loop()
        hosted.runner = loop.create_task(self._run(hosted))
        hosted.runner.add_done_callback(functools.partial(self._cancelled_before_start, hosted))
        if hosted.cancelled:
            hosted.runner.cancel()
        elif not hosted.task.generator:
            loop.call_soon(self._first_step_done, hosted)  # runs right after the task's first step

    def _first_step_done(self, hosted: Hosted) -> None:
        if hosted.runner is not None and not hosted.runner.done():
            self._to_io.post(self._host.started, hosted)

    def _cancelled_before_start(self, hosted: Hosted, runner: asyncio.Task[None]) -> None:
        # A task cancelled before its first step never enters `_run`'s try
        # block; report it here, or the call would stay in flight forever.
        if runner.cancelled():
            self._to_io.post(self._host.finish, hosted, CANCELLED)

    async def _run(self, hosted: Hosted) -> None:
        token = set_dispatcher(Upstream(self._host, self._io_loop, hosted))
        name = hosted.task.name
        span = _trace.start(hosted.task)  # None unless this process traces (OpenTelemetry)
        try:
            fn = hosted.code.resolve()
            args, kwargs = _wire.unpack_args(hosted.task.args, name)
            if hosted.task.generator:
                outcome = await self._drive(fn(*args, **kwargs), hosted)
            else:
                value = await fn(*args, **kwargs)
                outcome = (pb.Outcome.RETURN, _wire.dumps(value, what=f"the result of {name}()"), "")
        except asyncio.CancelledError:
            outcome = CANCELLED
        except BaseException as exc:
            outcome = (pb.Outcome.RAISE, *_wire.pack_exception(exc, name))
        finally:
            reset_dispatcher(token)
        if span is not None:
            _trace.end(span, outcome[0], outcome[2])
        self._to_io.post(self._host.finish, hosted, outcome)

    async def _drive(self, agen: Any, hosted: Hosted) -> Outcome:
        """Advance an async generator one step per Step frame, until it ends."""
        name = hosted.task.name
        try:
            while True:
                step = await hosted.steps.get()  # type: ignore[union-attr]  # a generator's call has its queue
                try:
                    if step.kind == pb.Step.NEXT:
                        value = await agen.__anext__()
                    elif step.kind == pb.Step.SEND:
                        value = await agen.asend(_wire.loads(step.value, what=f"the value sent to {name}()"))
                    elif step.kind == pb.Step.THROW:
                        value = await agen.athrow(_wire.loads(step.value, what=f"the exception thrown into {name}()"))
                    else:
                        await agen.aclose()
                        return STOP
                except StopAsyncIteration:
                    return STOP
                outcome = (pb.Outcome.YIELD, _wire.dumps(value, what=f"a value yielded by {name}()"), "")
                self._to_io.post(self._host.send, hosted, outcome)
        finally:
            try:
                await agen.aclose()
            except (Exception, asyncio.CancelledError):
                _log.debug("closing %s() raised", name, exc_info=True)


def _cancel_runner(hosted: Hosted) -> None:
    if hosted.runner is not None:
        hosted.runner.cancel()
