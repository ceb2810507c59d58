"""Nested dispatch, dispatcher side: run calls that workers open through the pool.

A routine running on worker A that calls another routine sends the call
back up A's stream (an even id). The pool accepts it at once, dispatches
it like any call of its own (balancer, admission, limits), and relays
frames both ways: A's steps down to worker B, B's outcomes up to A. Blobs
pass through untouched; this process never unpickles them. A dispatch
that fails (no worker, admission refused) becomes the call's RAISE
outcome, so A's routine sees the same error a top-level caller would.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from . import _wire
from ._calls import Task
from ._limits import Ticket
from ._proto import leakypool_pb2 as pb
from ._session import FINAL_OUTCOMES, OutgoingCall, Session

_log = logging.getLogger("leakypool.pool")


class _Relay:
    __slots__ = ("session", "id", "task", "parent", "steps", "runner")

    def __init__(self, session: Session, call_id: int, task: Task, parent: Ticket | None) -> None:
        self.session = session
        self.id = call_id
        self.task = task
        self.parent = parent
        self.steps: asyncio.Queue[pb.Step] = asyncio.Queue()
        self.runner: asyncio.Task[None] | None = None


class Dispatching(Protocol):
    """What the relay dispatches through: the pool."""

    async def start(self, task: Task, parent: Ticket | None = None) -> OutgoingCall:
        """Admit and dispatch ``task`` (made by the call holding ``parent``)."""
        ...


class NestedHost:
    """The `CallHost` of the pool's streams: serves workers' nested calls via ``target``."""

    def __init__(self, target: Dispatching) -> None:
        self._target = target

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        routine = frame.call.routine
        if routine.blob:
            session.received[routine.digest] = routine.blob
        blob = session.received.get(routine.digest)
        if blob is None:
            session.reject(frame.id, grpc.StatusCode.FAILED_PRECONDITION.value[0], "unknown routine digest")
            return
        caller = session.outgoing(frame.call.parent)  # the call whose routine made this one
        relay = _Relay(session, frame.id, Task.from_message(frame.call, blob), caller.ticket if caller else None)
        session.hosted[frame.id] = relay
        session.accept(frame.id)
        relay.runner = asyncio.ensure_future(self._run(relay))
        relay.runner.add_done_callback(lambda runner: self._cancelled_before_start(relay, runner))

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        relay = session.hosted.get(frame.id)
        if relay is None:
            return
        if frame.step.kind == pb.Step.CANCEL:
            relay.runner.cancel()
        else:
            relay.steps.put_nowait(frame.step)

    def on_session_end(self, session: Session) -> None:
        for relay in list(session.hosted.values()):
            relay.runner.cancel()

    @staticmethod
    def _cancelled_before_start(relay: _Relay, runner: asyncio.Task[None]) -> None:
        # Cancelled before its first step, `_run` never ran: answer for it.
        if runner.cancelled():
            relay.session.hosted.pop(relay.id, None)
            relay.session.outcome(relay.id, pb.Outcome.CANCELLED)

    async def _run(self, relay: _Relay) -> None:
        session, call_id = relay.session, relay.id
        try:
            downstream = await self._target.start(relay.task, relay.parent)
            try:
                outcome = await self._forward(relay, downstream)
            except BaseException:
                downstream.cancel()
                raise
        except asyncio.CancelledError:
            session.outcome(call_id, pb.Outcome.CANCELLED)
        except Exception as exc:
            session.outcome(call_id, pb.Outcome.RAISE, *_wire.pack_exception(exc, relay.task.name))
        else:
            session.forward(call_id, outcome)
        finally:
            session.hosted.pop(call_id, None)

    async def _forward(self, relay: _Relay, downstream: OutgoingCall) -> pb.Outcome:
        """Pass steps down and outcomes up until the final outcome."""
        if not relay.task.generator:
            return (await downstream.receive()).outcome
        while True:
            step = await relay.steps.get()
            downstream.step(step.kind, step.value)
            outcome = (await downstream.receive()).outcome
            if outcome.kind in FINAL_OUTCOMES:
                return outcome
            relay.session.forward(relay.id, outcome)
