"""Routines for the tracing test: they set up OpenTelemetry's SDK in the worker and hand back its spans.

A worker traces when its process has a tracer provider (as any OpenTelemetry
application would set one up); here a routine sets one up with the SDK's
in-memory exporter, and another returns what it holds, as plain dicts.
"""

from __future__ import annotations

import os
from typing import Any

import pool

_exporter: Any = None


def span_data(span: Any) -> dict[str, Any]:
    """A finished SDK span as plain, picklable data."""
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{span.context.trace_id:032x}",
        "span_id": f"{span.context.span_id:016x}",
        "parent_id": None if span.parent is None else f"{span.parent.span_id:016x}",
        "remote_parent": span.parent is not None and span.parent.is_remote,
        "attributes": dict(span.attributes or {}),
        "events": {e.name: dict(e.attributes or {}) for e in span.events},
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }


def install_sdk() -> Any:
    """Set a tracer provider exporting to memory in this process (once); its exporter."""
    global _exporter
    if _exporter is None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        _exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    return _exporter


@pool.routine
async def trace_here() -> int:
    """Make this worker trace; its pid."""
    install_sdk()
    return os.getpid()


@pool.routine
async def spans_here() -> list[dict[str, Any]]:
    """The spans this worker finished so far."""
    return [span_data(s) for s in install_sdk().get_finished_spans()]


@pool.routine
async def inner(x: int) -> int:
    return x + 1


@pool.routine
async def outer(x: int) -> int:
    """Calls `inner` from inside the worker (a nested call), under a span of its own."""
    from opentelemetry import trace

    with trace.get_tracer("routine").start_as_current_span("outer's own work"):
        return await inner(x) * 10


@pool.routine
async def broken() -> None:
    raise ValueError("broken on purpose")


@pool.routine(queue=pool.Queue("traced", concurrency=1))
async def queued(x: int) -> int:
    return x
