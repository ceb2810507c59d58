"""OpenTelemetry spans for the calls a worker runs, worker side (see ``pool/_observe/_trace.py``).

When this process has a tracer provider set, each call it runs gets a SERVER
span ``run NAME``, child of the dispatching-side span whose W3C
``traceparent`` came in the Call frame (a root span if none came), current
while the routine runs: the routine's own spans, and the calls it makes,
hang under it. Without a provider: one dictionary lookup per call, and a
nested call passes on the context its caller arrived with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._call import CallRecord
from .._observe import active_tracer, remote_context, traceparent
from .._transport import leakypool_pb2 as pb

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context  # an optional dependency: for the checker only

_OUTCOMES: dict[int, str] = {
    pb.Outcome.RETURN: "ok",
    pb.Outcome.STOP: "ok",
    pb.Outcome.RAISE: "error",
    pb.Outcome.CANCELLED: "cancelled",
}


def start(task: CallRecord) -> tuple[Any, Token[Context]] | None:
    """Open and make current ``task``'s worker-side span (call on the routine's own asyncio task); None: no tracing."""
    tracer = active_tracer()
    if tracer is None:
        return None
    from opentelemetry import context, trace

    parent = remote_context(task.traceparent) if task.traceparent else None
    attributes = {"leakypool.routine": task.name}
    if task.queue:
        attributes["leakypool.queue"] = task.queue
    span = tracer.start_span(f"run {task.name}", context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)
    return span, context.attach(trace.set_span_in_context(span))


def end(started: tuple[Any, Token[Context]], kind: int, traceback: str) -> None:
    """Close the span `start` opened, with the call's outcome."""
    from opentelemetry import context
    from opentelemetry.trace import StatusCode

    span, token = started
    context.detach(token)
    result = _OUTCOMES.get(kind, "ok")
    span.set_attribute("leakypool.outcome", result)
    if result == "error":
        span.set_status(StatusCode.ERROR, traceback.strip().splitlines()[-1] if traceback.strip() else "raised")
    span.end()


def outgoing(arrived_with: str) -> str:
    """The ``traceparent`` a nested call carries: the current span's here, else what its caller arrived with."""
    if active_tracer() is None:
        return arrived_with
    from opentelemetry import trace

    span_context = trace.get_current_span().get_span_context()
    return traceparent(span_context) if span_context.is_valid else arrived_with
