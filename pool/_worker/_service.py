"""The worker's service: its streams, whichever transport carries them, and the wiring of its parts.

    dispatcher ══ Dispatch stream ══> Session ── on_call ──> WorkerAdmission.decide
                                         │                 ├─ BUSY/DRAINING: Reject(code)
                                         │                 └─ ACCEPT: Accept (held), count it in flight
                                         │                              │ at once (unix socket), or a Hop (gRPC)
                                         │                              v
                                         │                    RoutineRunner (main loop, or own thread):
                                         │                    unpickle, run, pickle outcome
                                         │                              │
                                         └─ Accept + Outcome <──────────┘  release() -> Room frames

A call that ends at once costs one write: its Accept waits for its outcome (`QUICK_ACCEPT_S` at
most, and only until the routine first awaits). The dispatcher counts a call whose stream fails
after the Call left as lost after accepting (`WorkerBroken`): a call is never run twice.

Admission touches no user code but the hook, so a worker whose routines hog the CPU still answers
within milliseconds: on a pool's own worker the watch thread answers while a routine overruns the
main loop (`_overrun`); over gRPC user code runs on a routine loop of its own thread; plain calls
run in a line on a thread of their own (`_plain`, `_plain_calls`). When the worker stops is
`Lifecycle`'s business; the transports only hand it streams and State/Stop requests.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from backpressure import BackpressureLike

from .._base import TaskOwner
from .._call import CallRecord
from .._transport import (
    FAILED_PRECONDITION,
    INTERPRETER,
    LATE_MESSAGE,
    MISMATCH_MESSAGE,
    UNAVAILABLE,
    Read,
    Session,
    Write,
    WriteNow,
    buffers,
)
from .._transport import leakypool_pb2 as pb
from ._admission import Verdict, WorkerAdmission
from ._hosted import Code, Hosted, Outcome
from ._lifecycle import Lifecycle
from ._metrics import WorkerMetrics
from ._overrun import Guard, Here, Watch, task_factory, unlocked
from ._peers import STREAM_END_WAIT_S, Peer, lost_dispatcher, undecodable
from ._plain_calls import QUEUED_ACCEPT_S, PlainCalls
from ._release import IdleRelease
from ._runner import RoutineRunner
from ._signals import ResourceSignals
from ._state import worker_state
from ._threads import Hop, LoopThread
from ._upstream import bridge, in_task

_log = logging.getLogger("leakypool.worker")

QUICK_ACCEPT_S: Final[float] = 0.002
"""How long an Accept waits to leave with its call's outcome, at most (a routine busy computing its first step)."""


class WorkerService:
    """Runs the routines dispatchers send, within the worker's backpressure.

    Args:
        uid: This worker's uid (canonical string).
        backpressure: The admission hook; None accepts everything.
        capacity: Tasks it takes at once, as advertised (0 = unknown/unlimited).
        idle_timeout: Drain and exit after this many seconds idle; 0 = never.
        max_lifetime: Drain and exit at this age; 0 = never.
        hold_slot_while_waiting: Count a task that awaits a nested call against backpressure (`WorkerAdmission`).
        inline: Run routines on the main loop, with a watch thread that answers the streams while one overruns
            (`_overrun`): for a worker whose streams can all be read from a thread (its pool's unix socket).
            Otherwise routines get a loop thread of their own.
        plain_prefetch: Plain calls that may wait behind the running one (`_plain`).
        build: The build of the code it runs ("": unversioned); a call of another build is declined.
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
        inline: bool = False,
        plain_prefetch: int = 0,
        build: str = "",
    ) -> None:
        self.uid = uid
        self.build = build
        self.capacity = capacity
        self.signals = ResourceSignals()
        self.admission = WorkerAdmission(backpressure, hold_slots=hold_slot_while_waiting, signals=self.signals)
        self.metrics: WorkerMetrics | None = None  # set by whoever serves them (--metrics-port)
        self.tasks = TaskOwner(f"worker {uid}", _log)
        self.lifecycle = Lifecycle(
            self.admission,
            self.tasks,
            idle_timeout=idle_timeout,
            max_lifetime=max_lifetime,
            cancel_all=self._cancel_all,
            end_streams=self._end_streams,
        )
        self._peers: dict[Session, Peer] = {}
        self.inline = inline
        self._also_on_overrun: list[Callable[[], None]] = []
        self._routines: LoopThread | None = None
        self._watch: Watch | None = None
        self._guard: Guard | None = None
        self._runner: RoutineRunner | None = None
        self._release = IdleRelease()
        self._plain = PlainCalls(plain_prefetch, self, self.admission, self.lifecycle, self._urgent)

    @property
    def runner(self) -> RoutineRunner:
        """What runs the routines; there is one from `start` on (calls reach a service only then)."""
        if self._runner is None:
            raise RuntimeError("the worker service was not started")
        return self._runner

    @property
    def done(self) -> asyncio.Event:
        """Set once the worker has drained."""
        return self.lifecycle.done

    @property
    def exit_reason(self) -> str:
        """Why it drains ("" while serving)."""
        return self.lifecycle.exit_reason

    def start(self) -> None:
        """Start the routine loop (or the watch) and the lifetime timers (call on the I/O loop)."""
        loop = asyncio.get_running_loop()
        if self.inline:
            self._guard = guard = Guard()
            here = Here(loop, guard)
            self._runner = RoutineRunner(self, here, here, in_task, functools.partial(unlocked, guard))
            loop.set_task_factory(task_factory(guard))
            self._watch = Watch(guard, loop, self._overrun)
            self._watch.start()
        else:
            self._routines = LoopThread("leakypool-routines")
            self._runner = RoutineRunner(self, Hop(loop), self._routines.hop, bridge(loop))
            self._routines.start()
        self.lifecycle.start()
        self._plain.start()
        self.tasks.spawn(self.signals.run(self._sampled), name="resource signals")

    async def aclose(self) -> None:
        """Stop the timers, the background tasks and the routine loop (after the drain)."""
        self.lifecycle.stop()
        await self.tasks.aclose()
        self._plain.stop()
        if self._watch is not None:
            self._watch.stop()
        if self._routines is not None:
            self._routines.stop()

    def drain(self, reason: str, grace: float | None) -> Awaitable[None]:
        """See `Lifecycle.drain`."""
        return self.lifecycle.drain(reason, grace)

    def watch_also(self, answer: Callable[[], None]) -> None:
        """Have the watch thread call ``answer`` too while a routine overruns (an inline worker's transport)."""
        self._also_on_overrun.append(answer)

    def _overrun(self) -> None:
        """A routine holds the main loop: answer each stream from the watch thread (the lag so far is the loop's)."""
        since = self._guard.since if self._guard is not None else 0.0
        if since:
            self.signals.lagged(time.monotonic() - since)
        self._plain.pay(before=time.monotonic() - QUEUED_ACCEPT_S)  # (the loop's backstop for them waits too)
        for session, peer in list(self._peers.items()):
            if peer.through is not None:
                pull, write_through = peer.through
                pull()
                session.flush_through(write_through)
        for answer in self._also_on_overrun:
            answer()

    def _cancel_all(self) -> None:
        for peer in self._peers.values():
            for hosted in list(peer.hosted.values()):
                self._cancel(hosted)

    def _cancel(self, hosted: Hosted) -> None:
        if hosted.task.plain:
            self._plain.cancel(hosted)
        else:
            self.runner.cancel(hosted)

    async def _end_streams(self) -> None:
        for session in self._peers:
            session.finish()
        streams = [peer.stream for peer in self._peers.values() if peer.stream is not None]
        if streams:
            await asyncio.wait(streams, timeout=STREAM_END_WAIT_S)

    # -- the transports' entry points (`_grpc_server`, `_unix_server`) -------------------

    async def serve_stream(
        self,
        read: Read,
        write: Write,
        label: str,
        benign: tuple[type[BaseException], ...] = (),
        through: tuple[Callable[[], None], WriteNow] | None = None,
        **direct: Any,
    ) -> BaseException:
        """Serve one dispatcher's Dispatch stream until it ends; returns what ended it.

        A stream that ended on bytes that are not our protocol (see
        `undecodable`) is logged; the transport then ends it with an error.
        ``direct``: `Session.run`'s ``attach`` and ``write_now``, from a transport that has them.
        ``through``: the transport's ``pull`` and ``write_through``, for the watch thread (`_overrun`).
        """
        session = Session(odd=False, host=self, label=label)
        self._peers[session] = Peer(stream=asyncio.current_task(), through=through)
        try:
            reason = await session.run(read, write, lost_dispatcher, **direct)
        finally:
            del self._peers[session]
        if undecodable(reason, benign):
            _log.warning("closing the stream of %s: undecodable frames (%s)", label, reason)
        return reason

    def stop(self, request: pb.StopRequest) -> pb.WorkerState:
        """A dispatcher's Stop: drain (``request.grace`` s for calls in flight), report the state."""
        self.drain("asked to stop by a dispatcher", request.grace)
        return self.state()

    def state(self) -> pb.WorkerState:
        """This worker's load and lifecycle, as the State RPC reports it."""
        self._plain.settle()
        return worker_state(self.uid, self.capacity, self.admission, self.lifecycle, self.signals, self.build)

    # -- CallHost: calls the dispatcher opens ------------------------------------

    def on_call(self, session: Session, frame: pb.Frame) -> None:
        self._plain.settle()  # plain calls that ended since: out of the counts the hook sees
        peer = self._peers[session]
        call = frame.call
        routine = call.routine
        if routine.blob:
            peer.received[routine.digest] = Code(routine.blob, routine.name)
        code = peer.received.get(routine.digest)
        if code is None:
            session.reject(frame.id, FAILED_PRECONDITION, f"unknown routine digest for {routine.name}()")
            return
        if call.interpreter or call.build:
            mismatch = self._mismatch(call)
            if mismatch:  # not "full" and not queued: the pool offers it to a worker of its version, or names both
                session.reject(frame.id, UNAVAILABLE, f"{MISMATCH_MESSAGE}: {mismatch}")
                return
        hosted = Hosted(session, frame.id, CallRecord.from_message(call, code.blob), code)
        verdict = self.admission.decide(hosted.task)
        if isinstance(verdict, Verdict):
            self._answer(peer, hosted, verdict)
            return
        peer.hosted[hosted.id] = hosted  # steps and cancels may arrive while the hook runs
        self.tasks.spawn(self._vet(peer, hosted, verdict), name=f"vet {hosted.task.name}")

    def _mismatch(self, call: pb.Call) -> str:
        """Why this worker may not run ``call`` (issue 54), or "": code by value of another Python (declined before
        anything of it is loaded), or a call of another build (the code it names may differ here)."""
        if call.interpreter and call.interpreter != INTERPRETER:
            return f"it runs {INTERPRETER}, the call's code by value was made by {call.interpreter}"
        if call.build and call.build != self.build:
            return f"it runs build {self.build or '(none)'}, the call is of build {call.build}"
        return ""

    async def _vet(self, peer: Peer, hosted: Hosted, pending: Awaitable[Any]) -> None:
        try:
            rejected, error = await pending, None
        except Exception as exc:  # noqa: BLE001 - a user backpressure hook's fault rejects the call and is reported
            rejected, error = True, exc
        verdict = self.admission.settle(rejected, error)
        peer.hosted.pop(hosted.id, None)
        if hosted.cancelled or hosted.session.failure is not None:
            return
        self._answer(peer, hosted, verdict)

    def _answer(self, peer: Peer, hosted: Hosted, verdict: Verdict) -> None:
        session = hosted.session
        plain = hosted.task.plain
        start_by = hosted.task.start_by
        if start_by and verdict is Verdict.ACCEPT and (late := time.time() - start_by) >= 0:
            # A job's call that would start after its start-by time (its dispatching process's lease may have lapsed
            # meanwhile, and another process may run the job): declined unstarted, its job goes back to the store.
            buffers.forget(hosted.task.args)
            session.reject(hosted.id, UNAVAILABLE, f"{LATE_MESSAGE}: {late:.3f}s late by this worker's clock")
            return
        if verdict is Verdict.ACCEPT and not (self._plain.room(hosted) if plain else self.lifecycle.take()):
            # no room in the plain line (filled while an async hook vetted this one), or the task limit was
            # reached by a call the plain thread started meanwhile
            verdict = Verdict.BUSY if plain and self.admission.accepting else Verdict.DRAINING
        if verdict is Verdict.ACCEPT:
            hosted.started = time.monotonic()
            peer.hosted[hosted.id] = hosted
            alone = self.admission.admit()
            if alone:
                self.lifecycle.busy()
            self.lifecycle.counted()  # the last call of its task limit: stop accepting now
            if plain:
                self._plain.accept(hosted)  # its Accept (queued, or to start at once), its deadline, in line
                return
            # The Accept of a call that runs alone (its routine starts at once) waits for its
            # outcome if it ends at once (one write, one wake-up of the dispatcher); it leaves
            # as soon as the routine first awaits (`started`), or after QUICK_ACCEPT_S of a
            # first step that computes. Behind other calls (a routine hogging the CPU, say)
            # it leaves at once: holding it would make the dispatcher wait.
            hold = alone and session.holds_accepts and not hosted.task.generator
            session.accept(hosted.id, hold_s=QUICK_ACCEPT_S if hold else 0.0)
            self.runner.start(hosted)
            return
        buffers.forget(hosted.task.args)  # turned away: the descriptor of its large arguments is not kept
        if verdict is Verdict.HOOK_FAILED:
            # Fail closed but transient: the dispatcher rotates to another worker
            # and keeps this one; a buggy hook neither floods nor evicts it.
            _log.error(
                "backpressure hook %r raised on %s(); rejecting it as UNAVAILABLE",
                self.admission.hook,
                hosted.task.name,
                exc_info=self.admission.hook_error,
            )
        elif verdict is Verdict.BUSY:
            self.admission.turned_away(session)
        if self.metrics is not None:
            self.metrics.refused(verdict.name)
        message = verdict.message
        if verdict is Verdict.DRAINING:
            message = f"worker is draining ({self.exit_reason})"
        if verdict is Verdict.BUSY:
            counted = self.admission.active() + self.admission.vetting
            session.reject(hosted.id, verdict.code, message, counted, self.capacity)
        else:
            session.reject(hosted.id, verdict.code, message)

    def on_step(self, session: Session, frame: pb.Frame) -> None:
        peer = self._peers.get(session)
        hosted = None if peer is None else peer.hosted.get(frame.id)
        if hosted is None:
            return  # finished, or rejected, already
        kind = frame.step.kind
        if kind == pb.Step.CANCEL:
            self._cancel(hosted)
        elif kind == pb.Step.HAND_BACK:
            if hosted.task.plain:
                self._plain.hand_back(hosted, "the dispatcher asked for it")
        else:
            self.runner.step(hosted, frame.step)

    def on_session_end(self, session: Session) -> None:
        peer = self._peers.get(session)
        if peer is not None:
            for hosted in list(peer.hosted.values()):
                self._cancel(hosted)

    # -- Host: what the runner reports (where the streams live) -----------------------

    def started(self, hosted: Hosted) -> None:
        """``hosted``'s routine awaits something: it will not end at once, so its Accept leaves now."""
        hosted.session.release()

    def send(self, hosted: Hosted, outcome: Outcome) -> None:
        """A generator yielded: pass it on."""
        hosted.session.outcome(hosted.id, *outcome)

    def finish(self, hosted: Hosted, outcome: Outcome) -> None:
        """``hosted`` ended: report it, count it out, tell turned-away dispatchers there is room."""
        hosted.session.outcome(hosted.id, *outcome)
        self.book(hosted, outcome[0])

    def book(self, hosted: Hosted, kind: int | None, ended: float | None = None) -> None:
        """Count ``hosted`` out (its answer was written elsewhere, or it never ran: ``kind`` None)."""
        hosted.settled = True
        if hosted.timer is not None:
            hosted.timer.cancel()
        peer = self._peers.get(hosted.session)
        if peer is not None:
            peer.hosted.pop(hosted.id, None)
        if kind is not None:
            took = (ended or time.monotonic()) - hosted.started
            self.signals.finished(took)
            if self.metrics is not None:
                self.metrics.ended(kind, took)
        if sessions := self.admission.release():
            self._tell_room(sessions)
        if self.admission.in_flight == 0:
            self.lifecycle.idle()
        self.lifecycle.ended()  # past its memory limit: recycle

    def park(self, hosted: Hosted) -> None:
        """``hosted`` awaits a nested call: it stops counting against backpressure."""
        hosted.nested += 1
        if hosted.nested == 1:
            self._tell_room(self.admission.park())

    def unpark(self, hosted: Hosted) -> None:
        """``hosted``'s nested call returned: it counts again."""
        hosted.nested -= 1
        if hosted.nested == 0:
            self.admission.unpark()

    def line_freed(self) -> None:  # see `_plain_calls.Books.line_freed`
        self._tell_room(self.admission.room_now())

    def _urgent(self) -> bool:  # must the loop hear of a plain call that ended now (else: next message or tick)
        return bool(self.admission.owed_room or not self.admission.accepting or self.metrics or self.lifecycle.recycler)

    def _sampled(self) -> None:
        self._plain.settle()
        self._release.tick(self.admission.in_flight, self.lifecycle.idle_since)  # memory back, once idle
        # Turned calls away with nothing running: for its signals (memory, latency), which may have changed.
        self._tell_room(self.admission.idle_room())

    def _tell_room(self, sessions: Iterable[Session]) -> None:
        # Dispatchers we turned away may retry now (their queued calls move at once, not on a timer).
        for session in sessions:
            session.room(self.admission.in_flight, self.capacity, self.signals.memory_fraction, self.signals.loop_lag_s)

    def __repr__(self) -> str:
        return f"<WorkerService {self.uid} {self.admission!r} streams={len(self._peers)}>"
