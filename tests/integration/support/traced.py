"""Run by test_trace.py in a fresh interpreter: calls and a job with OpenTelemetry's SDK set up; prints the spans.

A script of its own so the tracer provider (global to a process, set once)
never leaks into other tests. It first checks that a pool without a
provider never imports OpenTelemetry, then sets one up (the SDK, exporting
to memory) here and in the worker, and prints both sides' spans as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

import pool


def otel_modules() -> list[str]:
    return sorted(m for m in sys.modules if m.startswith("opentelemetry"))


async def main(store: str) -> None:
    from tests.integration.routines import traced_routines as r

    report: dict[str, object] = {}
    async with pool.WorkerPool(spawn=1, store=store):
        assert await r.inner(1) == 2
        report["imported_without_provider"] = otel_modules()
        exporter = r.install_sdk()
        from opentelemetry import trace

        worker_pid = await r.trace_here()
        with trace.get_tracer("test").start_as_current_span("request"):
            report["outer"] = await r.outer(4)
            try:
                await r.broken()
            except ValueError:
                pass
            report["queued"] = await r.queued(7)
        job = await r.inner.submit(41)
        report["job"] = await job.result(timeout=60)
        report["worker"] = [s for s in await r.spans_here() if s["pid"] == worker_pid]
        report["pool"] = [r.span_data(s) for s in exporter.get_finished_spans()]
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
