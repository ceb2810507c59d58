"""Tests for pool._call._task: the public Task a hook sees; a CallRecord's time left, and its Call message both ways."""

from __future__ import annotations

import inspect
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._call._task import MIN_REMAINING_S, CallRecord, Task
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session


def session() -> Session:
    return Session(odd=True, host=None, label="worker w")


def task(**kwargs) -> CallRecord:
    fields = {"name": "app.f", "generator": False, "digest": b"d" * 16, "blob": b"routine", "args": b"\x80args"}
    return CallRecord(**(fields | kwargs))


class Span:
    """What a traced dispatch attaches (`_observe._trace.Attempt`): only its header is read here."""

    def header(self) -> str:
        return "00-" + "1" * 32 + "-" + "2" * 16 + "-01"


class TestRemaining:
    @pytest.mark.parametrize(("timeout", "expected"), [(None, None), (0.0, None), (2.5, 2.5)])
    def test_remaining_should_be_the_whole_timeout_when_not_dispatched_yet(self, timeout, expected):
        """Test that before its deadline is set a task has its timeout left (0 and None: no limit)."""
        assert task(timeout=timeout).remaining() == expected

    def test_remaining_should_count_down_to_the_deadline_when_dispatched(self):
        """Test the time left once the deadline is set (monotonic clock)."""
        t = task(timeout=10.0, deadline=time.monotonic() + 5.0)
        assert 4.0 < t.remaining() <= 5.0

    def test_remaining_should_never_go_below_the_minimum_when_the_deadline_passed(self):
        """Test that a task past its deadline still gets sent with a tiny positive timeout, never 0 ("no limit")."""
        assert task(timeout=1.0, deadline=time.monotonic() - 60).remaining() == MIN_REMAINING_S


class TestFill:
    def test_fill_should_send_the_routines_blob_once_per_session(self):
        """Test that the blob crosses with the first call of a digest on a stream, and only the digest after."""
        stream, other = session(), session()
        first, second, elsewhere = pb.Call(), pb.Call(), pb.Call()
        task().fill(first, stream)
        task().fill(second, stream)
        task().fill(elsewhere, other)
        assert first.routine.blob == b"routine" and second.routine.blob == b""
        assert elsewhere.routine.blob == b"routine"
        assert second.routine.digest == b"d" * 16 and second.routine.name == "app.f"

    def test_fill_should_leave_the_limits_unset_when_the_task_has_no_queue_or_workflow(self):
        """Test that a call without limits carries no Limits message (a worker then applies none)."""
        call = pb.Call()
        task(key="k").fill(call, session())
        assert not call.HasField("limits")

    @pytest.mark.parametrize("limits", [{"queue": "db", "concurrency": 2}, {"workflow": "wf"}])
    def test_fill_should_carry_the_limits_when_the_task_has_a_queue_or_a_workflow(self, limits):
        """Test that either a queue or a workflow makes the Limits travel, with every field."""
        call = pb.Call()
        task(**limits, total=9, key="tenant", halt_on_error=True).fill(call, session())
        sent = call.limits
        assert (sent.queue, sent.workflow) == (limits.get("queue", ""), limits.get("workflow", ""))
        assert (sent.concurrency, sent.total, sent.key, sent.halt_on_error) == (
            limits.get("concurrency", 0),
            9,
            "tenant",
            True,
        )

    def test_fill_should_send_the_time_left_when_the_task_has_a_timeout(self):
        """Test that the deadline travels as the seconds left, not the original timeout."""
        call = pb.Call()
        task(timeout=10.0, deadline=time.monotonic() + 3.0).fill(call, session())
        assert 2.0 < call.timeout <= 3.0
        untimed = pb.Call()
        task().fill(untimed, session())
        assert untimed.timeout == 0.0

    def test_fill_should_prefer_its_own_span_to_the_traceparent_it_arrived_with(self):
        """Test that a traced dispatch sends its span's header; an untraced one passes the incoming context on."""
        incoming = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
        traced, passed = pb.Call(), pb.Call()
        task(traceparent=incoming, trace=Span()).fill(traced, session())
        task(traceparent=incoming).fill(passed, session())
        assert traced.traceparent == Span().header() and passed.traceparent == incoming

    @pytest.mark.parametrize(("prefetch", "no_prefetch"), [(None, False), (3, False), (0, True)])
    def test_fill_should_mark_no_prefetch_only_when_prefetch_is_zero(self, prefetch, no_prefetch):
        """Test that only prefetch=0 asks the worker to refuse rather than queue a plain call."""
        call = pb.Call()
        task(plain=True, prefetch=prefetch).fill(call, session())
        assert call.no_prefetch is no_prefetch and call.routine.plain


class TestFromMessage:
    @given(
        name=st.text(min_size=1, max_size=20),
        generator=st.booleans(),
        args=st.binary(max_size=64).map(lambda b: b"\x80" + b),  # a pickle, never an out-of-band payload
        timeout=st.one_of(st.none(), st.floats(0.01, 1e6)),
        queue=st.text(max_size=8),
        workflow=st.text(max_size=8),
        concurrency=st.integers(0, 2**32 - 1),
        total=st.integers(0, 2**32 - 1),
        key=st.text(max_size=8),
        halt_on_error=st.booleans(),
        traceparent=st.text(max_size=55),
        plain=st.booleans(),
        prefetch=st.sampled_from([None, 0]),
        parent=st.integers(0, 2**64 - 1),
    )
    def test_from_message_should_invert_fill(self, **fields):
        """Test the round trip of every field a worker sees: what fill writes, from_message reads back."""
        sent = task(**fields)
        call = pb.Call()
        sent.fill(call, session())
        got = CallRecord.from_message(call, sent.blob)
        assert call.parent == sent.parent
        assert (got.name, got.generator, got.digest, got.blob, got.args) == (
            sent.name,
            sent.generator,
            sent.digest,
            sent.blob,
            sent.args,
        )
        assert got.timeout == pytest.approx(sent.timeout)
        assert (got.traceparent, got.plain, got.prefetch) == (sent.traceparent, sent.plain, sent.prefetch)
        limited = bool(sent.queue or sent.workflow)
        expected = (sent.queue, sent.concurrency, sent.total, sent.key, sent.workflow, sent.halt_on_error)
        default = ("", 0, 0, "", "", False)
        assert (got.queue, got.concurrency, got.total, got.key, got.workflow, got.halt_on_error) == (
            expected if limited else default
        )

    def test_from_message_should_read_a_zero_timeout_as_none(self):
        """Test that 0 on the wire is "no limit"."""
        assert CallRecord.from_message(pb.Call(), b"").timeout is None


PUBLIC = {"name", "generator", "plain", "timeout", "queue", "concurrency", "total", "key", "workflow", "halt_on_error"}


class TestPublicTask:
    def test_pool_task_should_be_the_protocol_hooks_see_and_name_only_what_needs_no_decoding(self):
        members = {name for name, value in inspect.getmembers(Task) if isinstance(value, property)}
        assert pool.Task is Task and Task.__module__ == "pool"
        assert members == PUBLIC | {"priority"}  # none of the wire form: digest, blob, args, trace...
        assert not members & {"digest", "blob", "args", "trace", "started", "deadline"}

    def test_the_record_a_hook_receives_should_be_a_task_with_the_values_it_was_made_with(self):
        record = task(timeout=2.5, queue="q", concurrency=2, total=3, key="k", workflow="w", halt_on_error=True)
        assert isinstance(record, pool.Task)
        seen: Task = record  # (what the type checker accepts: a record is a Task)
        assert (seen.name, seen.queue, seen.key, seen.timeout, seen.total) == ("app.f", "q", "k", 2.5, 3)

    def test_a_worker_side_record_made_from_the_message_should_be_a_task_too(self):
        call = pb.Call()
        task(queue="q").fill(call, session())
        assert isinstance(CallRecord.from_message(call, b"routine"), pool.Task)
