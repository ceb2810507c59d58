"""Tests for pool._worker._peers: a dispatcher's stream as a worker keeps it, and how the end of one is read."""

from __future__ import annotations

import asyncio

import pytest

from pool._errors import WorkerBroken
from pool._transport._framing import ProtocolError
from pool._worker._peers import STREAM_END_WAIT_S, Peer, lost_dispatcher, undecodable


class RpcError(Exception):
    """A transport's own "the stream ended" error (as gRPC's)."""


class TestPeer:
    def test_init_should_start_with_nothing_received_or_hosted_when_new(self):
        """Test that a new peer holds no routines, no calls and no stream."""
        peer = Peer()
        assert (peer.received, peer.hosted, peer.stream, peer.through) == ({}, {}, None, None)

    def test_init_should_give_each_peer_its_own_books_when_several_are_made(self):
        """Test that two dispatchers never share their routines or calls (no shared default dict)."""
        first, second = Peer(), Peer()
        first.received[b"digest"] = object()  # type: ignore[assignment]
        first.hosted[2] = object()  # type: ignore[assignment]
        assert second.received == {} and second.hosted == {}

    def test_peers_should_be_told_apart_by_identity_when_equal_in_content(self):
        """Test that peers are keyed by identity: two empty ones are different dispatchers."""
        first, second = Peer(), Peer()
        assert first != second
        assert len({first, second}) == 2


class TestUndecodable:
    @pytest.mark.parametrize(
        "reason",
        [ConnectionResetError("gone"), BrokenPipeError(), ConnectionError("closed"), asyncio.CancelledError()],
    )
    def test_undecodable_should_be_false_when_the_peer_left_or_the_worker_shuts_down(self, reason):
        """Test that a peer hanging up, or a shutdown, is not reported as bytes that are not our protocol."""
        assert not undecodable(reason)

    @pytest.mark.parametrize("reason", [ProtocolError("bad size"), ValueError("garbage"), KeyError("x")])
    def test_undecodable_should_be_true_when_the_stream_ended_on_anything_else(self, reason):
        """Test that a stream ended by a decoding fault is reported (the transport ends it with an error)."""
        assert undecodable(reason)

    def test_undecodable_should_be_false_when_the_error_is_one_the_transport_calls_benign(self):
        """Test that a transport's own end-of-stream error (gRPC's RpcError) counts as a peer that left."""
        assert undecodable(RpcError("cancelled"))
        assert not undecodable(RpcError("cancelled"), benign=(RpcError,))
        assert undecodable(ValueError("garbage"), benign=(RpcError,))


class TestLostDispatcher:
    def test_lost_dispatcher_should_be_worker_broken_naming_the_reason(self):
        """Test the error a call on a stream that ended is failed with."""
        error = lost_dispatcher(ConnectionResetError("peer hung up"))
        assert isinstance(error, WorkerBroken)
        assert "the dispatcher's stream ended: peer hung up" in str(error)


def test_stream_end_wait_should_be_positive_and_bounded():
    """Test that the exit wait for the streams is a real but short bound."""
    assert 0 < STREAM_END_WAIT_S <= 30
