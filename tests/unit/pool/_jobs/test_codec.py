"""Tests for pool._jobs._codec: a job's payload, written once and read by whichever process runs the job."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._call._task import CallRecord
from pool._jobs import _codec
from pool._jobs._codec import PAYLOAD_VERSION, RetryPolicy
from pool._transport import _side, _wire
from pool._transport._seal import Seal

SEAL = Seal(lambda: ("a test secret",), "a test secret")


def encode(sent: CallRecord, policy: RetryPolicy, job_id: str = "j1") -> bytes:
    return _codec.encode(sent, policy, job_id, SEAL)


def decode(payload: bytes, job_id: str = "j1") -> tuple[CallRecord, RetryPolicy]:
    return _codec.decode(job_id, payload, SEAL)


def reseal(pickled: bytes, job_id: str = "j1") -> bytes:
    """A payload pickle sealed as a holder of the secret would (for tests that build odd payloads)."""
    return SEAL.seal(f"job {job_id}", "payload", pickled)


def opened(payload: bytes, job_id: str = "j1") -> bytes:
    return SEAL.open(f"job {job_id}", "payload", payload)


KEPT = ("name", "digest", "blob", "args", "timeout", "queue", "concurrency", "total", "key", "workflow")
"""The fields of a CallRecord a payload keeps (with halt_on_error and plain)."""


def task(**kwargs) -> CallRecord:
    fields = {"name": "app.f", "generator": False, "digest": b"d" * 16, "blob": b"routine", "args": b""}
    return CallRecord(**(fields | kwargs))


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
        kept = _codec.task_of(_codec.payload_fields(task(**fields), policy, "v7"))  # what the submitter holds
        assert dataclasses.asdict(kept) == dataclasses.asdict(got) | {"build": "v7"}

    def test_decode_should_give_a_task_that_is_not_a_generator_and_carries_no_dispatch_state(self):
        """Test that what a payload does not keep comes back as a fresh CallRecord's defaults (a job is a coroutine call)."""
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
        """Test that a sealed payload that cannot be read is one SerializationError, not the unpickler's error."""
        with pytest.raises(pool.SerializationError, match="a job's payload cannot be read"):
            decode(reseal(payload))

    @pytest.mark.parametrize("payload", [b"", b"not a pickle", pickle.dumps("just a string")])
    def test_decode_should_raise_unsealed_when_the_payload_carries_no_seal(self, payload):
        """Test that an unsealed payload (an older release's, or a writer's without the secret) is refused."""
        with pytest.raises(
            pool.SerializationError, match=r"the payload of job j1 is not sealed.*leakypool jobs STORE_URL sign"
        ):
            decode(payload)

    def test_decode_should_raise_serialization_error_when_the_payload_is_from_another_release(self):
        """Test the version check: a newer payload is refused with both versions named."""
        _, fields = pickle.loads(opened(encode(task(), RetryPolicy())))
        newer = reseal(pickle.dumps((PAYLOAD_VERSION + 1, fields)))
        with pytest.raises(
            pool.SerializationError,
            match=f"has version {PAYLOAD_VERSION + 1}; this release reads {PAYLOAD_VERSION}",
        ):
            decode(newer)

    def test_decode_should_read_a_payload_written_before_plain_routines_as_not_plain(self):
        """Test that a payload without the ``plain`` field still decodes (compatibility)."""
        version, fields = pickle.loads(opened(encode(task(plain=True), RetryPolicy())))
        del fields["plain"]
        got, _ = decode(reseal(pickle.dumps((version, fields))))
        assert got.plain is False and got.name == "app.f"


RAN: list[str] = []
"""What `Hostile` did when it was unpickled."""


def _run_planted(what: str) -> None:
    RAN.append(what)


class Hostile:
    """Runs code as it is unpickled (what a role with INSERT on the jobs table could write)."""

    def __reduce__(self):
        return (_run_planted, ("planted code ran",))


class TestSeal:
    def setup_method(self):
        RAN.clear()

    def test_decode_should_load_nothing_when_the_payload_was_written_without_the_secret(self):
        """Test that a pickle planted as a payload is refused before a byte of it is unpickled."""
        planted = pickle.dumps((PAYLOAD_VERSION, Hostile()))
        with pytest.raises(pool.SerializationError, match="is not sealed"):
            decode(planted)
        forged = b"LPS1" + b"\0" * 32 + planted  # the seal's form, without the secret
        with pytest.raises(pool.SerializationError, match="was not written by a holder of this process's secret"):
            decode(forged)
        assert RAN == []
        pickle.loads(planted)  # (what would have happened)
        assert RAN == ["planted code ran"]

    def test_decode_should_refuse_a_payload_sealed_for_another_job(self):
        """Test that a genuine payload moved to another job's row does not check (the job id is in the MAC)."""
        payload = encode(task(), RetryPolicy(), job_id="a")
        with pytest.raises(pool.SerializationError, match="job b"):
            decode(payload, job_id="b")

    def test_open_outcome_should_refuse_a_payload_moved_to_the_outcome_column(self):
        """Test that the field is in the MAC: a sealed payload is no outcome."""
        payload = encode(task(), RetryPolicy())
        with pytest.raises(pool.SerializationError, match="outcome of job j1"):
            _codec.open_outcome("j1", payload, SEAL)
        assert _codec.open_outcome("j1", _codec.seal_outcome("j1", b"out", SEAL), SEAL) == b"out"

    def test_decode_should_accept_a_payload_sealed_by_any_secret_held(self):
        """Test rotation: a row sealed under the old secret still loads where both are held, not where only the new is."""
        old = Seal(lambda: ("old",), "old")
        payload = _codec.encode(task(), RetryPolicy(), "j1", old)
        both = Seal(lambda: ("new", "old"), "new and old")
        assert _codec.decode("j1", payload, both)[0].name == "app.f"
        with pytest.raises(pool.SerializationError):
            _codec.decode("j1", payload, Seal(lambda: ("new",), "new"))

    def test_reseal_should_sign_an_older_releases_payload_once(self):
        """Test the migration step: an unsealed payload is sealed; a sealed one is left alone."""
        legacy = pickle.loads(opened(encode(task(), RetryPolicy())))
        unsealed = pickle.dumps(legacy)
        sealed = _codec.reseal("j1", "payload", unsealed, SEAL)
        assert sealed is not None and decode(sealed)[0].name == "app.f"
        assert _codec.reseal("j1", "payload", sealed, SEAL) is None
