"""When a worker stops: idle timeout, maximum lifetime, recycling, and drains (signal, Stop RPC, lifeline).

serving ──(idle for idle_timeout | reached max_lifetime)──> retiring: drain, no time limit
   │    ──(its task or memory limit: `Recycler`)──> retiring, then exit EXIT_RETIRED
   │    ──(SIGTERM/SIGINT | Stop(grace) | lifeline closed)──> draining: drain within grace
   v
drain: stop accepting at once; wait until nothing is in flight or the
       grace ends (a later, shorter grace takes over); then cancel what
       is left, flush the last outcomes, end each stream; set `done`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Final

from .._base import TaskOwner
from ._admission import WorkerAdmission
from ._recycle import Recycler

_log = logging.getLogger("leakypool.worker")

CANCEL_WAIT_S: Final[float] = 5.0
"""After the grace, how long cancelled calls get to end before the worker exits anyway."""


class Lifecycle:
    """A worker's life: serving, then draining once, then done.

    Args:
        admission: The worker's counts (``accepting`` is switched off here).
        tasks: Owns the drain task.
        idle_timeout: Retire after this many seconds idle; 0 = never.
        max_lifetime: Retire at this age; 0 = never.
        cancel_all: Cancels every call still running (grace over).
        end_streams: Flushes and ends every stream; awaited last.
    """

    def __init__(
        self,
        admission: WorkerAdmission,
        tasks: TaskOwner,
        *,
        idle_timeout: float,
        max_lifetime: float,
        cancel_all: Callable[[], None],
        end_streams: Callable[[], Awaitable[None]],
    ) -> None:
        self._admission = admission
        self._tasks = tasks
        self._idle_timeout = idle_timeout
        self._max_lifetime = max_lifetime
        self._cancel_all = cancel_all
        self._end_streams = end_streams
        self.exit_reason = ""
        self.done = asyncio.Event()
        self.started = time.monotonic()
        self.idle_since = self.started
        self._idle = asyncio.Event()  # nothing in flight: kept only while draining (`_drain` waits on it)
        self._idle_timer: asyncio.TimerHandle | None = None
        self._lifetime_timer: asyncio.TimerHandle | None = None
        self._draining: asyncio.Task[None] | None = None
        self._deadline: float | None = None  # loop time by which in-flight calls must be done
        self._regrace = asyncio.Event()
        self._on_drain: list[Callable[[], object]] = []  # what they return is not used
        self._retired = ""  # set by `retired`: a reason to exit on purpose other than the recycler's
        self.recycler: Recycler | None = None  # set by whoever starts the worker (--max-tasks, --max-memory)
        self.handoff: Callable[[], Awaitable[object]] | None = None  # a recycle waits for this before ending streams

    def start(self) -> None:
        """Arm the idle and lifetime timers (call on the I/O loop)."""
        self._arm_idle_timer()
        if self._max_lifetime:
            loop = asyncio.get_running_loop()
            self._lifetime_timer = loop.call_later(
                self._max_lifetime, self._retire, f"reached --max-lifetime {self._max_lifetime:g}s"
            )

    def stop(self) -> None:
        """Disarm the timers (the worker is exiting)."""
        self._disarm_idle_timer()
        if self._lifetime_timer is not None:
            self._lifetime_timer.cancel()

    def on_drain(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` when the worker stops accepting (e.g. withdraw its record)."""
        self._on_drain.append(callback)

    def busy(self) -> None:
        """A call started on an idle worker (an idle timer stays armed: when it fires, it looks again)."""
        if self._draining is not None:
            self._idle.clear()

    def idle(self) -> None:
        """The last call in flight ended."""
        self.idle_since = time.monotonic()
        if self._draining is not None:
            self._idle.set()
        if self._idle_timer is None:
            self._arm_idle_timer()

    def take(self) -> bool:
        """Count a call that starts now against the task limit; False: the limit was reached (it must not start)."""
        return self.recycler is None or self.recycler.take()

    def counted(self) -> None:
        """Calls were counted (here or on the plain thread): retire if the last one the task limit allows started."""
        if self.recycler is not None and (reason := self.recycler.due()):
            self._retire(reason)

    def ended(self) -> None:
        """A call ended: retire if the worker grew past its memory limit."""
        if self.recycler is not None and (reason := self.recycler.on_end()):
            self._retire(reason)

    @property
    def recycled(self) -> str:
        """Why the worker recycles ("tasks", "memory", "timeout"), or "" if it does not."""
        return self._retired or ("" if self.recycler is None else self.recycler.reason)

    def retired(self, reason: str) -> None:
        """The worker leaves on purpose for ``reason`` (a plain call past its hard timeout): exit `EXIT_RETIRED`."""
        self._retired = reason

    def restart_idle_clock(self) -> None:
        """Count idleness from now (e.g. once the worker is discoverable, not from its start)."""
        if self._admission.in_flight == 0 and self._admission.accepting:
            self.idle_since = time.monotonic()
            self._disarm_idle_timer()
            self._arm_idle_timer()

    def drain(self, reason: str, grace: float | None) -> asyncio.Task[None]:
        """Stop accepting, let in-flight calls finish (``grace`` s; None = no limit), then set `done`.

        Called again while draining, a shorter grace takes over: SIGTERM still
        bounds a worker that is retiring (idle, max lifetime) without limit.
        """
        loop = asyncio.get_running_loop()
        deadline = None if grace is None else loop.time() + grace
        if self._draining is None:
            self._admission.accepting = False  # at once: no call may slip in before the drain task runs
            self.exit_reason = reason
            self._deadline = deadline
            self._draining = self._tasks.spawn(self._drain(), name="drain")
        elif deadline is not None and (self._deadline is None or deadline < self._deadline):
            self._deadline = deadline
            self._regrace.set()
        return self._draining

    async def _drain(self) -> None:
        self._disarm_idle_timer()
        if self._admission.in_flight == 0:  # from here on `busy` and `idle` keep it
            self._idle.set()
        for callback in self._on_drain:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one drain callback's fault is logged; the others still run
                _log.exception("drain callback failed")
        if not await self._wait_idle_until_deadline():
            _log.warning("%d call(s) still running when the grace ended; cancelling them", self._admission.in_flight)
            self._cancel_all()
            try:
                await asyncio.wait_for(self._idle.wait(), CANCEL_WAIT_S)
            except TimeoutError:
                _log.error("%d call(s) ignored cancellation; exiting anyway", self._admission.in_flight)
        if self.recycled and self.handoff is not None:
            await self.handoff()  # the pool closes our streams once it sent its last call: none is cut off
        await self._end_streams()
        self.done.set()

    async def _wait_idle_until_deadline(self) -> bool:
        """Wait until nothing is in flight (True) or the current deadline passes (False)."""
        loop = asyncio.get_running_loop()
        while not self._idle.is_set():
            self._regrace.clear()
            timeout = None if self._deadline is None else max(0.0, self._deadline - loop.time())
            idle = asyncio.ensure_future(self._idle.wait())
            regrace = asyncio.ensure_future(self._regrace.wait())
            try:
                await asyncio.wait((idle, regrace), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                idle.cancel()
                regrace.cancel()
            if not self._idle.is_set() and self._deadline is not None and loop.time() >= self._deadline:
                return False
        return True

    def _retire(self, reason: str) -> None:
        if self._draining is None:
            _log.info("retiring: %s", reason)
            self.drain(reason, None)

    def _arm_idle_timer(self, delay: float | None = None) -> None:
        # One timer for many calls: a call does not cancel it, nor its end make a new one (a timer each way per
        # call was ~4 µs of a no-op call); when it fires it retires the worker only if it has been idle for the
        # whole timeout, else it is armed again for what is left (or, busy, by `idle` when the last call ends).
        if self._idle_timeout and self._admission.accepting and self._idle_timer is None:
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(self._idle_timeout if delay is None else delay, self._idle_due)

    def _idle_due(self) -> None:
        self._idle_timer = None
        if self._admission.in_flight:
            return  # busy: `idle` arms it again
        left = self.idle_since + self._idle_timeout - time.monotonic()
        if left > 0:
            self._arm_idle_timer(left)
        else:
            self._retire(f"idle for --idle-timeout {self._idle_timeout:g}s")

    def _disarm_idle_timer(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
