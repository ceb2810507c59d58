"""Nested dispatch, dispatcher side: run calls that workers open through the pool.

A routine running on worker A that calls another routine sends the call
back up A's stream (an even id). The pool accepts it at once, dispatches
it like any call of its own (balancer, admission, limits), and relays
frames both ways: A's steps down to worker B, B's outcomes up to A. Blobs
pass through untouched; this process never unpickles them (large buffers
that came out of band are copied into a region of its own: `buffers.adopt`). A dispatch
that fails (no worker, admission refused) becomes the call's RAISE
outcome, so A's routine sees the same error a top-level caller would.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging

from .._base import TaskOwner
from .._call import CallRecord, Dispatches
from .._transport import FAILED_PRECONDITION, FINAL_OUTCOMES, HandedBack, OutgoingCall, Session, buffers, wire
from .._transport import leakypool_pb2 as pb

_log = logging.getLogger("leakypool.pool")


class _Relay:
    __slots__ = ("id", "parent", "runner", "session", "steps", "task")

    def __init__(self, session: Session, call_id: int, task: CallRecord, parent: OutgoingCall | None) -> None:
        self.session = session
        self.id = call_id
        self.task = task
        self.parent = parent
        self.steps: asyncio.Queue[pb.Step] = asyncio.Queue()
        self.runner: asyncio.Task[None] | None = None  # set once spawned, right after it is registered

    def cancel(self) -> None:
        """Cancel its runner (there is one by the time a step or the session's end can reach it)."""
        if self.runner is not None:
            self.runner.cancel()


@dataclasses.dataclass(eq=False)
class _Peer:
    received: dict[bytes, bytes] = dataclasses.field(default_factory=dict)  # routine blobs, by digest
    relays: dict[int, _Relay] = dataclasses.field(default_factory=dict)  # its calls being relayed, by id


class NestedHost:
    """The `CallHost` of the pool's streams: serves workers' nested calls through ``dispatcher``.

    Args:
        dispatcher: The pool (admission, limits, balancer).
        tasks: Owns the relay tasks (the pool's).
    """

    def __init__(self, dispatcher: Dispatches, tasks: TaskOwner) -> None:
        self._dispatcher = dispatcher
        self._tasks = tasks
        self._peers: dict[Session, _Peer] = {}

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        peer = self._peers.setdefault(session, _Peer())
        routine = frame.call.routine
        if routine.blob:
            peer.received[routine.digest] = routine.blob
        blob = peer.received.get(routine.digest)
        if blob is None:
            session.reject(frame.id, FAILED_PRECONDITION, "unknown routine digest")
            return
        caller = session.outgoing(frame.call.parent)  # the call whose routine made this one
        task = CallRecord.from_message(frame.call, blob)
        with contextlib.suppress(LookupError):  # its buffers never came: sending it raises, the call's RAISE
            task.args = buffers.adopt(task.args)  # large buffers: ours now, lent as often as the call is offered
        relay = _Relay(session, frame.id, task, caller)
        peer.relays[frame.id] = relay
        session.accept(frame.id)
        relay.runner = self._tasks.spawn(self._run(peer, relay), name=f"relay {relay.task.name}")
        relay.runner.add_done_callback(lambda runner: self._cancelled_before_start(peer, relay, runner))

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        peer = self._peers.get(session)
        relay = None if peer is None else peer.relays.get(frame.id)
        if relay is None:
            return
        if frame.step.kind == pb.Step.CANCEL:
            relay.cancel()
        else:
            relay.steps.put_nowait(frame.step)

    def on_session_end(self, session: Session) -> None:
        peer = self._peers.pop(session, None)
        if peer is not None:
            for relay in list(peer.relays.values()):
                relay.cancel()

    @staticmethod
    def _cancelled_before_start(peer: _Peer, relay: _Relay, runner: asyncio.Task[None]) -> None:
        # Cancelled before its first step, `_run` never ran: answer for it.
        if runner.cancelled() and peer.relays.pop(relay.id, None) is not None:
            relay.session.outcome(relay.id, pb.Outcome.CANCELLED)

    async def _run(self, peer: _Peer, relay: _Relay) -> None:
        session, call_id = relay.session, relay.id
        try:
            downstream = await self._dispatcher.dispatch(relay.task, relay.parent)
            while True:
                try:
                    outcome = await self._forward(relay, downstream)
                except HandedBack:  # a queued plain call came back unstarted: placed again
                    downstream = await self._dispatcher.dispatch(relay.task, relay.parent)
                    continue
                except BaseException:
                    downstream.cancel()
                    raise
                break
        except asyncio.CancelledError:
            session.outcome(call_id, pb.Outcome.CANCELLED)
        except Exception as exc:  # noqa: BLE001 - a nested call's exception crosses back to the calling worker as the routine's own
            session.outcome(call_id, pb.Outcome.RAISE, *wire.pack_exception(exc, relay.task.name))
        else:
            session.forward(call_id, outcome)
        finally:
            peer.relays.pop(call_id, None)

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
