"""Tests for pool._transport._seal: what a store keeps opens only for the row and field it was sealed for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._transport._seal import MAC_BYTES, MAGIC, Seal, is_sealed

SEAL = Seal(lambda: ("one secret",), "a test secret")


class TestSeal:
    @given(row=st.text(max_size=40), field=st.sampled_from(["payload", "outcome", "record"]), data=st.binary())
    def test_open_should_invert_seal(self, row, field, data):
        """Test the round trip for any row id (any characters) and any data."""
        sealed = SEAL.seal(row, field, data)
        assert is_sealed(sealed) and SEAL.open(row, field, sealed) == data

    @given(data=st.binary(min_size=1), at=st.integers(min_value=0), bit=st.integers(0, 7))
    def test_open_should_refuse_any_changed_bit(self, data, at, bit):
        """Test that flipping any one bit of a sealed blob (magic, MAC or data) makes it refused."""
        sealed = bytearray(SEAL.seal("job a", "payload", data))
        sealed[at % len(sealed)] ^= 1 << bit
        with pytest.raises(pool.SerializationError):
            SEAL.open("job a", "payload", bytes(sealed))

    @given(a=st.text(max_size=8), b=st.text(max_size=8), data=st.binary(max_size=8))
    def test_open_should_refuse_a_blob_moved_to_another_row(self, a, b, data):
        """Test that the row id is bound, with no ambiguity where ids and data meet (lengths, not separators)."""
        if a == b:
            return
        with pytest.raises(pool.SerializationError):
            SEAL.open(b, "payload", SEAL.seal(a, "payload", data))
        with pytest.raises(pool.SerializationError):
            SEAL.open(a + "\0", "payload", SEAL.seal(a, "payload", b"\0" + data))

    def test_open_should_refuse_a_blob_moved_to_another_field(self):
        """Test that the field is bound: a sealed payload is no outcome."""
        with pytest.raises(pool.SerializationError, match="the outcome of job a was not written by a holder"):
            SEAL.open("job a", "outcome", SEAL.seal("job a", "payload", b"x"))

    def test_open_should_name_the_migration_step_for_an_unsealed_blob(self):
        """Test the message for an older release's blob (or a planted one): not sealed, and what to run."""
        with pytest.raises(
            pool.SerializationError, match=r"the payload of job a is not sealed.*leakypool jobs STORE_URL sign"
        ):
            SEAL.open("job a", "payload", b"\x80\x05plain pickle")
        assert not is_sealed(MAGIC + b"short")

    def test_open_should_follow_a_rotation(self):
        """Test that any secret held opens, the first seals, and a secret dropped no longer opens."""
        held = ["old"]
        seal = Seal(lambda: tuple(held), "a rotating secret")
        old = seal.seal("r", "payload", b"x")
        held[:] = ["new", "old"]
        new = seal.seal("r", "payload", b"x")
        assert seal.open("r", "payload", old) == seal.open("r", "payload", new) == b"x"
        assert Seal(lambda: ("new",), "new only").open("r", "payload", new) == b"x"
        held[:] = ["new"]
        with pytest.raises(pool.SerializationError):
            seal.open("r", "payload", old)

    def test_seal_should_raise_when_no_secret_is_held(self):
        """Test that nothing is written unsealed for want of a secret."""
        with pytest.raises(pool.SerializationError, match="holds no secret"):
            Seal(lambda: (), "nothing").seal("r", "payload", b"x")

    def test_seal_should_add_only_the_magic_and_the_mac(self):
        """Test a sealed blob's size: what a store keeps grows by 36 bytes."""
        assert len(SEAL.seal("r", "f", b"")) == len(MAGIC) + MAC_BYTES
