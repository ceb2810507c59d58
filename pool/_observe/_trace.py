"""OpenTelemetry spans for calls and job attempts, dispatching side (the ``otel`` extra: opentelemetry-api).

A pool traces only when the application has imported OpenTelemetry and set
a tracer provider: `active_tracer` looks for ``opentelemetry.trace`` in
``sys.modules`` and never imports it, so a pool whose process does not use
OpenTelemetry pays one dictionary lookup per call, and ``import pool``
imports nothing of it.

Each traced call or job attempt gets a CLIENT span, ``call NAME`` or
``job NAME``, under the caller's current span (a nested call: under the
worker-side span of the routine that made it, whose W3C ``traceparent``
came up in the Call frame). The span starts when the call is admitted
(its start time taken then) but is created only when a Call frame first
needs its context, so a job attempt that does not fit its limits records
nothing. It carries the routine, the queue and the kind; an ``accepted``
event with the admission wait; and the outcome (``ok``, ``error``,
``cancelled``, ``lost``, or the error that kept it from starting).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from .._version import __version__

if TYPE_CHECKING:
    from .._call import CallRecord
    from .._transport import OutgoingCall

TRACER_NAME: Final[str] = "leakypool"
"""The instrumentation scope of every span leakypool makes."""

_NO_TRACER: Final[tuple[Any, Any]] = (None, None)
_cached: tuple[Any, Any] = _NO_TRACER  # (provider, its tracer or None): one provider lookup per change


def active_tracer() -> Any | None:
    """The tracer to use now, or None: OpenTelemetry not imported, or no provider set (never imports it)."""
    global _cached
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if provider is _cached[0]:
        return _cached[1]
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        tracer = None
    else:
        tracer = provider.get_tracer(TRACER_NAME, __version__)
    _cached = (provider, tracer)
    return tracer


def traceparent(span_context: Any) -> str:
    """A span context as a W3C ``traceparent`` header value."""
    return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{span_context.trace_flags:02x}"


def remote_context(header: str) -> Any:
    """An OpenTelemetry context whose parent is the span a ``traceparent`` names (invalid ones: none)."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": header})


class Attempt:
    """The dispatching-side span of one call or job attempt; `CallRecord.fill` asks it for the context to send."""

    __slots__ = ("_kind", "_parent", "_start_ns", "_task", "_tracer", "span")

    def __init__(self, tracer: Any, kind: str, task: CallRecord) -> None:
        from opentelemetry import context

        self._tracer = tracer
        self._kind = kind
        self._task = task
        # Captured now: the span may be created later, on another asyncio task (the queue's pump).
        self._parent = remote_context(task.traceparent) if task.traceparent else context.get_current()
        self._start_ns = time.time_ns()
        self.span: Any = None

    def header(self) -> str:
        """The ``traceparent`` of this attempt's span (created on first use)."""
        return traceparent(self.started().get_span_context())

    def started(self) -> Any:
        if self.span is None:
            from opentelemetry.trace import SpanKind

            task = self._task
            attributes = {"leakypool.routine": task.name, "leakypool.kind": self._kind}
            if task.queue:
                attributes["leakypool.queue"] = task.queue
            if task.workflow:
                attributes["leakypool.workflow"] = task.workflow
            self.span = self._tracer.start_span(
                f"{self._kind} {task.name}",
                context=self._parent,
                kind=SpanKind.CLIENT,
                attributes=attributes,
                start_time=self._start_ns,
            )
        return self.span

    def accepted(self, call: OutgoingCall) -> None:
        """A worker accepted it: note the admission wait; end the span when the call ends."""
        span = self.started()
        wait_s = (time.time_ns() - self._start_ns) / 1e9
        span.add_event("accepted", {"leakypool.admission_wait_s": wait_s, "leakypool.worker": call.session.label})
        span.set_attribute("leakypool.admission_wait_s", wait_s)
        call.on_finish(self._finished)

    def _finished(self, call: OutgoingCall) -> None:
        from opentelemetry.trace import StatusCode

        from ._metrics import outcome

        result = outcome(call)
        self.span.set_attribute("leakypool.outcome", result)
        if result in ("error", "lost"):
            self.span.set_status(StatusCode.ERROR, f"{self._task.name}(): {result}")
        self.span.end()

    def failed(self, exc: BaseException) -> None:
        """It never started: a call's span says why; a job attempt's only if a Call frame went out."""
        if self.span is None and self._kind == "job":
            return
        from opentelemetry.trace import StatusCode

        span = self.started()
        span.set_attribute("leakypool.outcome", type(exc).__name__)
        if isinstance(exc, Exception):
            span.record_exception(exc)
            span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        span.end()

    def not_placed(self) -> None:
        """A job attempt that did not fit its limits (no frame went out, so usually no span)."""
        if self.span is not None:
            self.span.set_attribute("leakypool.outcome", "not_placed")
            self.span.end()


async def traced(
    tracer: Any, kind: str, dispatch: Callable[[], Awaitable[OutgoingCall | None]], task: CallRecord
) -> OutgoingCall | None:
    """Run ``dispatch()`` (the call path, again) with ``task`` traced as one ``kind`` ("call", "job")."""
    attempt = Attempt(tracer, kind, task)
    task.trace = attempt
    try:
        call = await dispatch()
    except BaseException as exc:
        attempt.failed(exc)
        raise
    finally:
        task.trace = None  # a later dispatch of the same task (a job's next attempt) gets a span of its own
    if call is None:
        attempt.not_placed()
    else:
        attempt.accepted(call)
    return call
