"""Tests for the tracing hooks' cheap check and the W3C context they send (no provider is set here)."""

from __future__ import annotations

import sys

from opentelemetry import trace

from pool._observe import _trace


def test_no_opentelemetry_imported_should_mean_no_tracer(monkeypatch):
    """Test the per-call check when the application never imported OpenTelemetry."""
    monkeypatch.delitem(sys.modules, "opentelemetry.trace")
    assert _trace.active_tracer() is None


def test_opentelemetry_without_a_provider_should_mean_no_tracer():
    """Test that the API alone (its proxy provider) records nothing."""
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert _trace.active_tracer() is None


def test_traceparent_should_round_trip_through_the_w3c_propagator():
    """Test the header the Call frame carries against OpenTelemetry's own parser."""
    sent = trace.SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=False, trace_flags=trace.TraceFlags(1)
    )
    header = _trace.traceparent(sent)
    assert header == "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    got = trace.get_current_span(_trace.remote_context(header)).get_span_context()
    assert (got.trace_id, got.span_id, got.trace_flags, got.is_remote) == (sent.trace_id, sent.span_id, 1, True)
    assert not trace.get_current_span(_trace.remote_context("garbage")).get_span_context().is_valid


def test_opentelemetry_should_be_imported_by_no_module_of_pool():
    """Test that the otel extra stays optional: pool (and a worker) never import it at module level."""
    import pathlib
    import subprocess

    root = pathlib.Path(__file__).resolve().parents[4]
    check = (
        "import sys, pool, pool._worker._main, pool._worker._runner; "
        "sys.exit(any(m.startswith('opentelemetry') for m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", check], cwd=root, timeout=120, check=False).returncode == 0
