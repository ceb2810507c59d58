"""Tests for the one framing of a stream (`pool._transport._framer`): bytes in, messages out, no I/O."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._transport._framer import PREFIX_BYTES, Framer, ProtocolError, framed, message_size, prefix

messages = st.lists(st.binary(max_size=300), max_size=12)


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


class TestSplit:
    @given(messages, st.lists(st.integers(min_value=0), max_size=20))
    def test_split_should_give_back_every_message_in_order_however_the_bytes_are_cut(self, sent, cuts):
        """Test the invariant: framed messages, cut anywhere into pieces, come out whole, in order, none extra."""
        data = b"".join(framed(m) for m in sent)
        framer = Framer(1 << 20)
        got: list[bytes] = []
        for piece in _pieces(data, cuts):
            framer.split(piece, lambda m: got.append(bytes(m)))
        assert got == sent
        assert framer.held == 0

    def test_split_should_say_when_a_message_that_took_several_pieces_arrived_whole(self):
        """Test that completing a message held from an earlier piece returns True, and a piece that holds only
        whole messages (or only part of one) returns False."""
        framer = Framer(100)
        data = framed(b"x" * 10)
        assert framer.split(data, lambda m: None) is False
        assert framer.split(data[:7], lambda m: None) is False
        assert framer.held == 7
        assert framer.split(data[7:], lambda m: None) is True

    def test_split_should_refuse_a_message_over_its_limit_before_keeping_it(self):
        """Test that an announced length over the limit raises at once (nothing of it is waited for), after the
        messages before it were delivered; and that a raised limit lets it through."""
        framer = Framer(8)
        got: list[bytes] = []
        with pytest.raises(ProtocolError, match="9-byte message"):
            framer.split(framed(b"ok") + prefix(9), lambda m: got.append(bytes(m)))
        assert got == [b"ok"]
        framer = Framer(8)
        framer.limit = 9
        framer.split(framed(b"123456789"), lambda m: got.append(bytes(m)))
        assert got == [b"ok", b"123456789"]


class TestNext:
    @given(messages, st.lists(st.integers(min_value=0), max_size=20))
    def test_next_should_take_messages_one_at_a_time_however_the_bytes_are_cut(self, sent, cuts):
        """Test the same invariant for `hold`/`next`, the handshake's way of reading."""
        framer = Framer(0)
        got: list[bytes] = []
        for piece in _pieces(b"".join(framed(m) for m in sent), cuts):
            framer.hold(piece)
            while (message := framer.next(1 << 20)) is not None:
                got.append(message)
        assert got == sent
        assert framer.rest() == b""

    def test_next_should_apply_each_steps_limit_and_leave_the_rest(self):
        """Test that each `next` has its own limit, and `rest` gives back what follows untouched."""
        framer = Framer(0)
        framer.hold(framed(b"hello") + framed(b"a" * 20) + b"\x00\x00")
        assert framer.next(5) == b"hello"
        with pytest.raises(ProtocolError, match="20-byte message where at most 10"):
            framer.next(10)
        assert framer.next(20) == b"a" * 20
        assert framer.next(20) is None  # two bytes of a length: not yet a message
        assert framer.rest() == b"\x00\x00"

    def test_unread_should_put_bytes_back_in_front(self):
        """Test that bytes read ahead and given back come before what is held."""
        framer = Framer(0)
        data = framed(b"first") + framed(b"second")
        framer.hold(data[6:])
        framer.unread(data[:6])
        assert [framer.next(10), framer.next(10)] == [b"first", b"second"]


def test_message_size_should_read_the_length_and_check_the_limit():
    """Test the dialler's read: the 4-byte length of a message, refused over the limit."""
    assert message_size(prefix(256), 256) == 256
    assert len(prefix(0)) == PREFIX_BYTES
    with pytest.raises(ProtocolError):
        message_size(prefix(257), 256)
