"""Tests for pool._worker._grpc_server: the caller's address as gRPC names it, read for the uid check."""

from __future__ import annotations

import pytest

from pool._transport._handshake import Refused
from pool._worker._grpc_server import peer_address


@pytest.mark.parametrize(
    ("peer", "address"),
    [
        ("ipv4:127.0.0.1:5000", ("127.0.0.1", 5000)),
        ("ipv6:%5B::1%5D:40158", ("::1", 40158)),  # what gRPC says for [::1]: percent-encoded (it once slipped by)
        ("ipv6:[::1]:40158", ("::1", 40158)),
        ("unix:/run/w.sock", None),
    ],
)
def test_peer_address_should_read_what_grpc_names_a_caller(peer, address):
    assert peer_address(peer) == address


def test_an_ip_peer_that_does_not_parse_should_be_refused_not_let_through():
    with pytest.raises(Refused):
        peer_address("ipv4:nonsense")
