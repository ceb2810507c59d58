"""Tests for pool._worker._trace: a call's worker-side span, its parent, its outcome, and what nested calls carry.

A real OpenTelemetry SDK provider exporting to memory, made this test's own without touching the process-wide
one (`sdk`): tests/unit/pool/_observe/test_trace.py checks that none is set, and the API allows setting it once.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from pool._call._task import CallRecord
from pool._transport._proto import leakypool_pb2 as pb
from pool._worker import _trace

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
"""A caller's W3C traceparent, as a Call frame brings it."""
PARENT_TRACE = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_SPAN = 0xB7AD6B7169203331


@pytest.fixture
def sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """A tracer provider current for this test only; its exporter (finished spans)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # what get_tracer_provider() returns once set
    try:
        yield exporter
    finally:
        provider.shutdown()


def task(traceparent: str = "", queue: str = "") -> CallRecord:
    return CallRecord(
        name="work", generator=False, digest=b"d", blob=b"", args=b"", traceparent=traceparent, queue=queue
    )


class TestStart:
    def test_start_should_do_nothing_when_no_provider_is_set(self):
        """Test that a worker without tracing opens no span (one lookup per call)."""
        assert _trace.start(task(PARENT)) is None

    def test_start_should_open_a_current_server_span_under_the_callers_when_a_traceparent_came(self, sdk):
        """Test that the span is `run NAME`, a SERVER span, the child of the dispatching side's span, and current."""
        started = _trace.start(task(PARENT))
        assert started is not None
        span, _ = started
        try:
            assert trace.get_current_span() is span
        finally:
            _trace.end(started, pb.Outcome.RETURN, "")
        (finished,) = sdk.get_finished_spans()
        assert finished.name == "run work"
        assert finished.kind is SpanKind.SERVER
        assert (finished.parent.trace_id, finished.parent.span_id) == (PARENT_TRACE, PARENT_SPAN)
        assert finished.parent.is_remote
        assert finished.context.trace_id == PARENT_TRACE
        assert finished.attributes["leakypool.routine"] == "work"
        assert "leakypool.queue" not in finished.attributes

    def test_start_should_open_a_root_span_when_no_traceparent_came(self, sdk):
        """Test that a call sent untraced still gets its worker-side span, with no parent."""
        started = _trace.start(task())
        assert started is not None
        _trace.end(started, pb.Outcome.RETURN, "")
        (finished,) = sdk.get_finished_spans()
        assert finished.parent is None

    def test_start_should_name_the_queue_when_the_call_has_one(self, sdk):
        """Test that a call on a named queue says which, on its span."""
        started = _trace.start(task(queue="emails"))
        assert started is not None
        _trace.end(started, pb.Outcome.RETURN, "")
        assert sdk.get_finished_spans()[0].attributes["leakypool.queue"] == "emails"


class TestEnd:
    @pytest.mark.parametrize(
        ("kind", "outcome"),
        [
            (pb.Outcome.RETURN, "ok"),
            (pb.Outcome.STOP, "ok"),
            (pb.Outcome.RAISE, "error"),
            (pb.Outcome.CANCELLED, "cancelled"),
            (pb.Outcome.YIELD, "ok"),  # not an end: read as ok rather than failing the call
        ],
    )
    def test_end_should_record_the_outcome_when_the_call_ends(self, sdk, kind, outcome):
        """Test the outcome attribute for each way a call ends; only an error sets the ERROR status."""
        started = _trace.start(task())
        assert started is not None
        _trace.end(started, kind, "Traceback ...\nValueError: boom\n" if outcome == "error" else "")
        (finished,) = sdk.get_finished_spans()
        assert finished.attributes["leakypool.outcome"] == outcome
        assert (finished.status.status_code is StatusCode.ERROR) == (outcome == "error")

    def test_end_should_describe_an_error_by_the_last_line_of_its_traceback(self, sdk):
        """Test that the ERROR status says what was raised, as the traceback's last line does."""
        started = _trace.start(task())
        assert started is not None
        _trace.end(started, pb.Outcome.RAISE, "Traceback (most recent call last):\n  ...\nKeyError: 'k'\n\n")
        assert sdk.get_finished_spans()[0].status.description == "KeyError: 'k'"

    def test_end_should_say_raised_when_an_error_came_without_a_traceback(self, sdk):
        """Test that an error with an empty traceback still has a description."""
        started = _trace.start(task())
        assert started is not None
        _trace.end(started, pb.Outcome.RAISE, "  \n")
        assert sdk.get_finished_spans()[0].status.description == "raised"

    def test_end_should_make_the_span_no_longer_current(self, sdk):
        """Test that the routine's span is detached when the call ends (the next call does not inherit it)."""
        before = trace.get_current_span()
        started = _trace.start(task(PARENT))
        assert started is not None
        _trace.end(started, pb.Outcome.RETURN, "")
        assert trace.get_current_span() is before


class TestOutgoing:
    def test_outgoing_should_pass_on_what_the_caller_arrived_with_when_not_tracing(self):
        """Test that a worker without a provider hands a nested call its caller's context, untouched."""
        assert _trace.outgoing(PARENT) == PARENT
        assert _trace.outgoing("") == ""

    def test_outgoing_should_name_the_current_span_when_tracing(self, sdk):
        """Test that a nested call made inside the routine's span is that span's child."""
        started = _trace.start(task(PARENT))
        assert started is not None
        span, _ = started
        try:
            header = _trace.outgoing(PARENT)
        finally:
            _trace.end(started, pb.Outcome.RETURN, "")
        context = span.get_span_context()
        assert header == f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        assert header != PARENT

    def test_outgoing_should_pass_on_what_the_caller_arrived_with_when_no_span_is_current(self, sdk):
        """Test that tracing on, but outside any span, the caller's context still travels."""
        assert _trace.outgoing(PARENT) == PARENT
