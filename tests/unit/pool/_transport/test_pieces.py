"""Tests for pool._transport._pieces: any message crosses gRPC in pieces no larger than a gRPC message may be."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pool._transport._framing import ProtocolError
from pool._transport._pieces import GRPC_MESSAGE_MAX_BYTES, PIECE_BYTES, Assembler, pieces


class TestPieces:
    @settings(max_examples=20, deadline=None)
    @given(size=st.sampled_from([0, 1, PIECE_BYTES - 1, PIECE_BYTES, PIECE_BYTES + 1, 3 * PIECE_BYTES + 7]))
    def test_a_message_should_come_back_whole_from_pieces_that_each_fit_a_grpc_message(self, size):
        message = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        assembler = Assembler()
        out = []
        for piece in pieces(message):
            assert len(piece) <= GRPC_MESSAGE_MAX_BYTES
            whole = assembler.add(piece)
            if whole is not None:
                out.append(bytes(whole))
        assert out == [message]

    def test_a_message_over_the_limit_should_be_refused_before_it_is_whole(self):
        assembler = Assembler(limit=PIECE_BYTES + 10)
        parts = list(pieces(b"x" * (3 * PIECE_BYTES)))
        assert assembler.add(parts[0]) is None
        with pytest.raises(ProtocolError):
            assembler.add(parts[1])  # refused at the piece that crosses the limit: the rest is never held

    @given(piece=st.binary(max_size=64))
    def test_anything_that_is_not_a_piece_should_be_refused(self, piece):
        assembler = Assembler(limit=16)
        if piece and piece[0] <= 1 and len(piece) - 1 <= 16:
            assembler.add(piece)  # a piece (the start of a message, or all of one)
            return
        with pytest.raises(ProtocolError):
            assembler.add(piece)
