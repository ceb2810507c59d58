"""Tests for sealed streams (`pool._transport._stream_seal`): what a relay without the secret can no longer do."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._transport._framer import ProtocolError
from pool._transport._handshake import Dialler, Keyring, Refused, Responder
from pool._transport._stream_seal import LARGE_BYTES, TAG_BYTES, StreamSeal, stream_keys

WORKER = uuid.UUID(int=7)


def sealed_pair(*, sealed: bool = True) -> tuple[Dialler, Responder]:
    """A pool's and a worker's ends of one handshake, the pool asking for sealed messages."""
    dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
    responder = Responder(Keyring(["s"]), "Dispatch", WORKER)
    responder.check(dialler.proof(responder.answer(dialler.challenge()), sealed=sealed))
    return dialler, responder


def seals() -> tuple[StreamSeal, StreamSeal]:
    dialler, responder = sealed_pair()
    assert dialler.seal is not None and responder.seal is not None
    return dialler.seal, responder.seal


class TestHandshake:
    def test_a_sealed_proof_should_give_both_ends_matching_seals(self):
        """Test that a pool asking for seals and its worker open each other's messages, both ways."""
        pool_end, worker_end = seals()
        assert bytes(worker_end.open(pool_end.seal(b"call"))) == b"call"
        assert bytes(pool_end.open(worker_end.seal(b"outcome"))) == b"outcome"

    def test_an_unsealed_proof_should_leave_both_ends_without_a_seal(self):
        """Test the default (loopback, TLS): no seal on either end."""
        dialler, responder = sealed_pair(sealed=False)
        assert dialler.seal is None and responder.seal is None

    def test_a_relay_should_not_turn_a_sealed_proof_into_an_unsealed_one(self):
        """Test that swapping the proof's kind (to strip the seals) fails the handshake: the label is bound in."""
        dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
        responder = Responder(Keyring(["s"]), "Dispatch", WORKER)
        proof = dialler.proof(responder.answer(dialler.challenge()), sealed=True)
        with pytest.raises(Refused):
            responder.check(b"LPP1" + proof[4:])

    def test_streams_should_have_keys_of_their_own(self):
        """Test that a message sealed on one stream does not open on another (fresh nonces in every handshake)."""
        first, _ = seals()
        _, other = seals()
        with pytest.raises(ProtocolError):
            other.open(first.seal(b"call"))


class TestSeal:
    @given(st.lists(st.binary(max_size=200), max_size=8))
    def test_messages_in_order_should_open_to_themselves(self, messages):
        """Test the invariant: every message sealed in order opens, in order, to what was sealed."""
        pool_end, worker_end = seals()
        assert [bytes(worker_end.open(pool_end.seal(m))) for m in messages] == messages

    @given(st.binary(min_size=1, max_size=64), st.data())
    def test_any_altered_byte_should_end_the_stream(self, message, data):
        """Test that flipping any bit of a sealed message, its tag included, is refused."""
        pool_end, worker_end = seals()
        sealed = bytearray(pool_end.seal(message))
        at = data.draw(st.integers(min_value=0, max_value=len(sealed) - 1))
        sealed[at] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        with pytest.raises(ProtocolError, match="does not carry its seal"):
            worker_end.open(bytes(sealed))

    def test_a_large_message_should_be_sealed_too_and_an_altered_byte_refused(self):
        """Test the other MAC (HMAC-SHA256 from `LARGE_BYTES`): it opens, and one byte changed in the middle does not;
        nor does one message's tag under the other MAC's length (a message cut or padded across the line)."""
        pool_end, worker_end = seals()
        large = bytes(range(256)) * (LARGE_BYTES // 256 + 1)
        assert bytes(worker_end.open(pool_end.seal(large))) == large
        sealed = bytearray(pool_end.seal(large))
        sealed[len(large) // 2] ^= 0x40
        with pytest.raises(ProtocolError):
            worker_end.open(bytes(sealed))
        pool_end, worker_end = seals()
        sealed = pool_end.seal(large[: LARGE_BYTES - 1])
        with pytest.raises(ProtocolError):
            worker_end.open(sealed[:-TAG_BYTES] + b"x" + sealed[-TAG_BYTES:])

    def test_a_replayed_dropped_or_reordered_message_should_be_refused(self):
        """Test that the number in each tag catches a message sent twice, one skipped, and two swapped."""
        pool_end, worker_end = seals()
        first, second = pool_end.seal(b"one"), pool_end.seal(b"two")
        worker_end.open(first)
        with pytest.raises(ProtocolError):
            worker_end.open(first)  # replayed
        pool_end, worker_end = seals()
        first, second = pool_end.seal(b"one"), pool_end.seal(b"two")
        with pytest.raises(ProtocolError):
            worker_end.open(second)  # the first dropped, or the two swapped

    def test_a_message_should_not_bounce_back_to_its_sender(self):
        """Test that the directions have keys of their own: a pool's message reflected to the pool is refused."""
        pool_end, _ = seals()
        with pytest.raises(ProtocolError):
            pool_end.open(pool_end.seal(b"call"))

    def test_an_unsealed_message_should_be_refused(self):
        """Test that a message shorter than a tag, or a plain one, does not open."""
        _, worker_end = seals()
        with pytest.raises(ProtocolError, match="without its seal"):
            worker_end.open(b"x" * (TAG_BYTES - 1))
        with pytest.raises(ProtocolError):
            worker_end.open(b"a plain message, no tag")

    def test_stream_keys_should_differ_by_direction(self):
        """Test that the two keys of a stream differ (a reflected message cannot verify)."""
        to_worker, to_pool = stream_keys(b"secret", b"transcript")
        assert to_worker != to_pool and len(to_worker) == 32
