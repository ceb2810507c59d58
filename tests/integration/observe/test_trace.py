"""OpenTelemetry across the process boundary, with the real SDK (in-memory exporter) on both sides.

The pool and its worker run in a fresh interpreter (`traced.py`) so that the
process-global tracer provider never reaches other tests; it prints both
sides' finished spans, and this test checks the tree they make.
"""

from __future__ import annotations

import json
import sys

import pytest

from tests.integration.support.child import run_script

pytestmark = pytest.mark.integration


def one(spans: list[dict], name: str) -> dict:
    found = [s for s in spans if s["name"] == name]
    assert len(found) == 1, (name, [s["name"] for s in spans])
    return found[0]


def parent_of(span: dict, spans: list[dict]) -> dict:
    (parent,) = [s for s in spans if s["span_id"] == span["parent_id"]]
    assert parent["trace_id"] == span["trace_id"]
    return parent


async def test_calls_nested_calls_and_jobs_should_make_one_tree_across_processes(tmp_path):
    """Test caller span -> call span -> worker span -> (nested) call span -> worker span; outcomes; a job."""
    out, _ = await run_script(
        [sys.executable, "-m", "tests.integration.support.traced", f"sqlite:///{tmp_path / 'jobs.db'}"]
    )
    report = json.loads(out)
    assert report["imported_without_provider"] == []  # a pool without a provider never imports OpenTelemetry
    assert (report["outer"], report["queued"], report["job"]) == (50, 7, 42)
    pool_spans, worker_spans = report["pool"], report["worker"]
    everything = pool_spans + worker_spans
    assert {s["pid"] for s in pool_spans}.isdisjoint({s["pid"] for s in worker_spans})

    request = one(pool_spans, "request")
    call_outer = one(pool_spans, "call outer")
    assert parent_of(call_outer, everything) == request
    assert call_outer["kind"] == "CLIENT" and call_outer["attributes"]["leakypool.outcome"] == "ok"
    assert call_outer["attributes"]["leakypool.routine"] == "outer"
    assert call_outer["events"]["accepted"]["leakypool.admission_wait_s"] >= 0

    run_outer = one(worker_spans, "run outer")
    assert run_outer["kind"] == "SERVER" and run_outer["remote_parent"]
    assert parent_of(run_outer, everything) == call_outer  # the context crossed in the Call frame

    own = one(worker_spans, "outer's own work")
    assert parent_of(own, everything) == run_outer  # the worker span is current while the routine runs
    call_inner = [s for s in pool_spans if s["name"] == "call inner" and s["trace_id"] == request["trace_id"]]
    (call_inner,) = call_inner
    assert parent_of(call_inner, everything) == own  # a nested call hangs under its caller, across processes
    run_inner = [s for s in worker_spans if s["name"] == "run inner" and s["parent_id"] == call_inner["span_id"]]
    assert len(run_inner) == 1 and run_inner[0]["attributes"]["leakypool.outcome"] == "ok"

    call_broken, run_broken = one(pool_spans, "call broken"), one(worker_spans, "run broken")
    assert parent_of(run_broken, everything) == call_broken and parent_of(call_broken, everything) == request
    assert call_broken["status"] == run_broken["status"] == "ERROR"
    assert call_broken["attributes"]["leakypool.outcome"] == run_broken["attributes"]["leakypool.outcome"] == "error"

    queued = one(pool_spans, "call queued")
    assert queued["attributes"]["leakypool.queue"] == "traced"
    assert one(worker_spans, "run queued")["attributes"]["leakypool.queue"] == "traced"

    job = one(pool_spans, "job inner")
    assert job["attributes"]["leakypool.kind"] == "job" and job["attributes"]["leakypool.outcome"] == "ok"
    (run_job,) = [s for s in worker_spans if s["parent_id"] == job["span_id"]]
    assert run_job["name"] == "run inner" and run_job["trace_id"] == job["trace_id"]
