"""Tests for pool._jobs._codec: a job's payload, written once and read by whichever process runs the job."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._call._task import Task
from pool._jobs._codec import PAYLOAD_VERSION, RetryPolicy, decode, encode
from pool._transport import _side, _wire

KEPT = ("name", "digest", "blob", "args", "timeout", "queue", "concurrency", "total", "key", "workflow")
"""The fields of a Task a payload keeps (with halt_on_error and plain)."""


def task(**kwargs) -> Task:
    fields = {"name": "app.f", "generator": False, "digest": b"d" * 16, "blob": b"routine", "args": b""}
    return Task(**(fields | kwargs))


class Unpicklable(Exception):
    def __reduce__(self):
        raise TypeError("no")


class TestEncode:
    @given(
        name=st.text(min_size=1, max_size=20),
        digest=st.binary(max_size=16),
        blob=st.binary(max_size=64),
        args=st.binary(max_size=64).map(lambda b: b"\x80" + b),
        timeout=st.one_of(st.none(), st.floats(0.001, 1e6)),
        queue=st.text(max_size=8),
        concurrency=st.integers(0, 1000),
        total=st.integers(0, 1000),
        key=st.text(max_size=8),
        workflow=st.text(max_size=8),
        halt_on_error=st.booleans(),
        plain=st.booleans(),
        backoff=st.floats(0, 1e3),
        retry_on=st.lists(st.sampled_from([KeyError, ValueError, pool.WorkerBroken, TimeoutError]), max_size=3),
    )
    def test_decode_should_invert_encode(self, backoff, retry_on, **fields):
        """Test the round trip of every field a payload keeps, and the retry policy."""
        policy = RetryPolicy(backoff, tuple(retry_on))
        got, got_policy = decode(encode(task(**fields), policy))
        assert {f: getattr(got, f) for f in (*KEPT, "halt_on_error", "plain")} == fields
        assert got_policy == policy

    def test_decode_should_give_a_task_that_is_not_a_generator_and_carries_no_dispatch_state(self):
        """Test that what a payload does not keep comes back as a fresh Task's defaults (a job is a coroutine call)."""
        sent = task(generator=True, parent=7, priority=3, traceparent="tp", prefetch=0, deadline=1.0)
        got, _ = decode(encode(sent, RetryPolicy()))
        assert (got.generator, got.parent, got.priority, got.traceparent, got.prefetch, got.deadline) == (
            False,
            0,
            0,
            "",
            None,
            None,
        )

    def test_encode_should_raise_serialization_error_when_retry_on_cannot_be_pickled(self):
        """Test that a retry_on that will not pickle fails at submission, naming the routine."""
        with pytest.raises(pool.SerializationError, match=r"retry_on of app\.f\(\)"):
            encode(task(), RetryPolicy(1.0, (Unpicklable("instance, not a type"),)))  # type: ignore[arg-type]

    def test_encode_should_put_out_of_band_buffers_back_in_the_payload(self, monkeypatch):
        """Test that arguments whose large buffers sit in a shared region are stored as plain bytes."""
        monkeypatch.setattr(_side, "_expected", True)  # as in a process that reaches workers over unix sockets
        data = b"y" * (1 << 20)
        args = _wire.pack_args("app.f", (data,), {})
        assert args[:1] != b"\x80"  # out of band: a region's descriptor
        got, _ = decode(encode(task(args=args), RetryPolicy()))
        assert got.args[:1] == b"\x80"
        assert _wire.unpack_args(got.args, "app.f") == ((data,), {})


class TestDecode:
    @pytest.mark.parametrize("payload", [b"", b"not a pickle", pickle.dumps("just a string")])
    def test_decode_should_raise_serialization_error_when_the_payload_is_corrupt(self, payload):
        """Test that a payload that cannot be read is one SerializationError, not the unpickler's error."""
        with pytest.raises(pool.SerializationError, match="a job's payload cannot be read"):
            decode(payload)

    def test_decode_should_raise_serialization_error_when_the_payload_is_from_another_release(self):
        """Test the version check: a newer payload is refused with both versions named."""
        _, fields = pickle.loads(encode(task(), RetryPolicy()))
        newer = pickle.dumps((PAYLOAD_VERSION + 1, fields))
        with pytest.raises(
            pool.SerializationError,
            match=f"has version {PAYLOAD_VERSION + 1}; this release reads {PAYLOAD_VERSION}",
        ):
            decode(newer)

    def test_decode_should_read_a_payload_written_before_plain_routines_as_not_plain(self):
        """Test that a payload without the ``plain`` field still decodes (compatibility)."""
        version, fields = pickle.loads(encode(task(plain=True), RetryPolicy()))
        del fields["plain"]
        got, _ = decode(pickle.dumps((version, fields)))
        assert got.plain is False and got.name == "app.f"
