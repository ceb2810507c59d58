"""The worker's gRPC service: admit calls, run routines, report state, drain.

    dispatcher ══ Dispatch stream ══> Session ── on_call ──> backpressure hook
                                         │                 ├─ True:  Reject(RESOURCE_EXHAUSTED)
                                         │                 └─ False: Accept, count it in flight
                                         │                              │ Hop
                                         │                              v
                                         │                    routine loop (own thread):
                                         │                    unpickle, run, pickle outcome
                                         │                              │ Hop
                                         └──── Outcome frame <──────────┘

Admission (the hook, the count, Accept/Reject) happens on the gRPC loop and
touches no user code but the hook, so a worker whose routines hog the CPU
still answers within milliseconds. Everything user-defined (unpickling the
routine and its arguments, running it, pickling its result) happens on the
routine loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import grpc

from backpressure import BackpressureContext, BackpressureLike

from ._calls import Task
from ._errors import WorkerBroken
from ._proto import leakypool_pb2 as pb
from ._runner import Code, Hosted, Outcome, RoutineRunner
from ._session import Session
from ._threads import Hop, LoopThread

_log = logging.getLogger("leakypool.worker")

SERVICE = "leakypool.v1.Worker"
"""The gRPC service name; methods are /leakypool.v1.Worker/<Method>."""

_RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
_UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
_FAILED_PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION.value[0]

class WorkerService:
    """Runs the routines dispatchers send, within the worker's backpressure.

    Args:
        uid: This worker's uid (canonical string).
        backpressure: The admission hook; None accepts everything.
        capacity: Tasks it takes at once, as advertised (0 = unknown/unlimited).
        idle_timeout: Drain and exit after this many seconds idle; 0 = never.
        max_lifetime: Drain and exit at this age; 0 = never.
        hold_slot_while_waiting: Count a task that awaits a nested call
            against backpressure. Off (the default), a waiting task frees
            its slot until the nested call returns, so routines that call
            routines cannot deadlock a pool of workers capped at 1 task.
    """

    def __init__(
        self,
        *,
        uid: str,
        backpressure: BackpressureLike | None,
        capacity: int = 0,
        idle_timeout: float = 0.0,
        max_lifetime: float = 0.0,
        hold_slot_while_waiting: bool = False,
    ) -> None:
        self.uid = uid
        self.capacity = capacity
        self.accepting = True
        self.exit_reason = ""
        self.done = asyncio.Event()
        self._hook = backpressure
        self._idle_timeout = idle_timeout
        self._max_lifetime = max_lifetime
        self._started = time.monotonic()
        self._idle_since = self._started
        self._in_flight = 0
        self._parked = 0
        self._vetting = 0  # calls an async backpressure hook is still deciding on
        self._hold_slots = hold_slot_while_waiting
        self._turned_away: set[Session] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._sessions: dict[Session, asyncio.Task[Any]] = {}
        self._draining: asyncio.Task[None] | None = None
        self._deadline: float | None = None  # loop time by which in-flight calls must be done
        self._regrace = asyncio.Event()
        self._on_drain: list[Callable[[], None]] = []
        self._routines = LoopThread("leakypool-routines")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: RoutineRunner | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        """Start the routine loop and the lifetime timers (call on the gRPC loop)."""
        self._loop = asyncio.get_running_loop()
        self._runner = RoutineRunner(self, self._loop, Hop(self._loop), self._routines.hop)
        self._routines.start()
        self._arm_idle_timer()
        if self._max_lifetime:
            self._loop.call_later(self._max_lifetime, self._retire, f"reached --max-lifetime {self._max_lifetime:g}s")

    def close(self) -> None:
        """Stop the routine loop (after `drain`)."""
        self._routines.stop()

    def on_drain(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` when the worker stops accepting (e.g. withdraw its record)."""
        self._on_drain.append(callback)

    def drain(self, reason: str, grace: float | None) -> asyncio.Task[None]:
        """Stop accepting, let in-flight calls finish (``grace`` s; None = no limit), then set `done`.

        Called again while draining, a shorter grace takes over: SIGTERM still
        bounds a worker that is retiring (idle, max lifetime) without limit.
        """
        loop = asyncio.get_running_loop()
        deadline = None if grace is None else loop.time() + grace
        if self._draining is None:
            self.accepting = False  # at once: no call may slip in before the drain task runs
            self.exit_reason = reason
            self._deadline = deadline
            self._draining = asyncio.ensure_future(self._drain())
        elif deadline is not None and (self._deadline is None or deadline < self._deadline):
            self._deadline = deadline
            self._regrace.set()
        return self._draining

    async def _drain(self) -> None:
        self._disarm_idle_timer()
        for callback in self._on_drain:
            try:
                callback()
            except Exception:
                _log.exception("drain callback failed")
        if not await self._wait_idle_until_deadline():
            _log.warning("%d call(s) still running when the grace ended; cancelling them", self._in_flight)
            for session in self._sessions:
                for hosted in list(session.hosted.values()):
                    self._runner.cancel(hosted)
            try:
                await asyncio.wait_for(self._idle.wait(), 5.0)
            except TimeoutError:
                _log.error("%d call(s) ignored cancellation; exiting anyway", self._in_flight)
        # Flush the last outcomes, then end each stream cleanly.
        for session in self._sessions:
            session.finish()
        if self._sessions:
            await asyncio.wait(list(self._sessions.values()), timeout=5.0)
        self.done.set()

    async def _wait_idle_until_deadline(self) -> bool:
        """Wait until nothing is in flight (True) or the current deadline passes (False)."""
        loop = asyncio.get_running_loop()
        while not self._idle.is_set():
            self._regrace.clear()
            timeout = None if self._deadline is None else max(0.0, self._deadline - loop.time())
            waiters = [asyncio.ensure_future(self._idle.wait()), asyncio.ensure_future(self._regrace.wait())]
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            if not self._idle.is_set() and self._deadline is not None and loop.time() >= self._deadline:
                return False
        return True

    def _retire(self, reason: str) -> None:
        if self._draining is None:
            _log.info("retiring: %s", reason)
            self.drain(reason, None)

    def restart_idle_clock(self) -> None:
        """Count idleness from now (e.g. once the worker is discoverable, not from its start)."""
        if self._in_flight == 0 and self.accepting:
            self._idle_since = time.monotonic()
            self._disarm_idle_timer()
            self._arm_idle_timer()

    def _arm_idle_timer(self) -> None:
        if self._idle_timeout and self.accepting and self._loop is not None:
            self._idle_timer = self._loop.call_later(
                self._idle_timeout, self._retire, f"idle for --idle-timeout {self._idle_timeout:g}s"
            )

    def _disarm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    # -- gRPC ------------------------------------------------------------------

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler serving `SERVICE`."""
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Dispatch": grpc.stream_stream_rpc_method_handler(
                    self._dispatch, pb.Frames.FromString, pb.Frames.SerializeToString
                ),
                "Stop": grpc.unary_unary_rpc_method_handler(
                    self._stop, pb.StopRequest.FromString, pb.WorkerState.SerializeToString
                ),
                "State": grpc.unary_unary_rpc_method_handler(
                    self._state, pb.StateRequest.FromString, pb.WorkerState.SerializeToString
                ),
            },
        )

    async def _dispatch(self, requests: Any, context: grpc.aio.ServicerContext) -> None:
        session = Session(odd=False, host=self, label=f"dispatcher {context.peer()}")
        self._sessions[session] = asyncio.current_task()  # type: ignore[assignment]
        try:
            await session.run(context.read, context.write, _lost_dispatcher)
        finally:
            del self._sessions[session]

    async def _stop(self, request: pb.StopRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        self.drain("asked to stop by a dispatcher", request.grace)
        return self.state()

    async def _state(self, request: pb.StateRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        return self.state()

    def state(self) -> pb.WorkerState:
        """This worker's load and lifecycle, as the State RPC reports it."""
        now = time.monotonic()
        return pb.WorkerState(
            uid=self.uid,
            pid=os.getpid(),
            in_flight=self._in_flight,
            waiting=self._parked,
            idle_seconds=(now - self._idle_since) if self._in_flight == 0 else 0.0,
            capacity=self.capacity,
            accepting=self.accepting,
            uptime_seconds=now - self._started,
            version=_version(),
        )

    # -- CallHost: calls the dispatcher opens ------------------------------------

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        call = frame.call
        routine = call.routine
        if routine.blob:
            session.received[routine.digest] = Code(routine.blob, routine.name)
        code = session.received.get(routine.digest)
        if code is None:
            session.reject(frame.id, _FAILED_PRECONDITION, f"unknown routine digest for {routine.name}()")
            return
        if not self.accepting:
            session.reject(frame.id, _UNAVAILABLE, f"worker is draining ({self.exit_reason})")
            return
        hosted = Hosted(session, frame.id, Task.from_message(call, code.blob), code)
        if self._hook is None:
            self._accept(hosted)
            return
        try:
            verdict = self._hook(BackpressureContext(active_task_count=self.active() + self._vetting, task=hosted.task))
        except Exception:
            self._hook_failed(hosted)
            return
        if inspect.isawaitable(verdict):
            session.hosted[hosted.id] = hosted  # steps and cancels may arrive while the hook runs
            self._vetting += 1  # counted like a running task until decided, so a burst cannot slip past
            asyncio.ensure_future(self._admit_later(hosted, verdict))
        elif verdict:
            self._turn_away(session, hosted.id)
        else:
            self._accept(hosted)

    async def _admit_later(self, hosted: Hosted, verdict: Any) -> None:
        try:
            rejected = await verdict
        except Exception:
            hosted.session.hosted.pop(hosted.id, None)
            self._hook_failed(hosted)
            return
        finally:
            self._vetting -= 1
        if hosted.cancelled or hosted.session.failure is not None:
            hosted.session.hosted.pop(hosted.id, None)
        elif not self.accepting:
            hosted.session.hosted.pop(hosted.id, None)
            hosted.session.reject(hosted.id, _UNAVAILABLE, "worker is draining")
        elif rejected:
            hosted.session.hosted.pop(hosted.id, None)
            self._turn_away(hosted.session, hosted.id)
        else:
            self._accept(hosted)

    def active(self) -> int:
        """Tasks that count against backpressure: in flight, less those parked on nested calls."""
        return self._in_flight if self._hold_slots else max(0, self._in_flight - self._parked)

    def _turn_away(self, session: Session, call_id: int) -> None:
        session.reject(call_id, _RESOURCE_EXHAUSTED, "rejected by backpressure")
        self._turned_away.add(session)

    def _room_freed(self) -> None:
        # Tell dispatchers we turned away that they may retry: their queued
        # calls move at once instead of waiting for a timer.
        if self._turned_away:
            sessions, self._turned_away = self._turned_away, set()
            for session in sessions:
                session.room(self._in_flight, self.capacity)

    def park(self, hosted: Hosted) -> None:
        """``hosted`` awaits a nested call: it stops counting against backpressure."""
        hosted.nested += 1
        if hosted.nested == 1:
            self._parked += 1
            if not self._hold_slots:
                self._room_freed()

    def unpark(self, hosted: Hosted) -> None:
        """``hosted``'s nested call returned: it counts again."""
        hosted.nested -= 1
        if hosted.nested == 0:
            self._parked -= 1

    def _hook_failed(self, hosted: Hosted) -> None:
        # Fail closed but transient: the dispatcher rotates to another worker
        # and keeps this one; a buggy hook neither floods nor evicts it.
        _log.exception("backpressure hook %r raised; rejecting %s() as UNAVAILABLE", self._hook, hosted.task.name)
        hosted.session.reject(hosted.id, _UNAVAILABLE, "backpressure hook failed; see the worker's log")

    def _accept(self, hosted: Hosted) -> None:
        session = hosted.session
        session.hosted[hosted.id] = hosted
        session.accept(hosted.id)
        if self._in_flight == 0:
            self._idle.clear()
            self._disarm_idle_timer()
        self._in_flight += 1
        self._runner.start(hosted)

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        hosted = session.hosted.get(frame.id)
        if hosted is None:
            return  # finished, or rejected, already
        if frame.step.kind == pb.Step.CANCEL:
            self._runner.cancel(hosted)
        else:
            self._runner.step(hosted, frame.step)

    def on_session_end(self, session: Session) -> None:
        for hosted in list(session.hosted.values()):
            self._runner.cancel(hosted)

    def send(self, hosted: Hosted, outcome: Outcome) -> None:
        """A generator yielded: pass it on (gRPC loop)."""
        hosted.session.outcome(hosted.id, *outcome)

    def finish(self, hosted: Hosted, outcome: Outcome) -> None:
        """``hosted`` ended: report it and count it out (gRPC loop)."""
        hosted.session.hosted.pop(hosted.id, None)
        hosted.session.outcome(hosted.id, *outcome)
        self._in_flight -= 1
        self._room_freed()
        if self._in_flight == 0:
            self._idle_since = time.monotonic()
            self._idle.set()
            self._arm_idle_timer()

def _lost_dispatcher(reason: BaseException) -> BaseException:
    return WorkerBroken(f"the dispatcher's stream ended: {reason}")


def _version() -> str:
    from . import __version__

    return __version__
