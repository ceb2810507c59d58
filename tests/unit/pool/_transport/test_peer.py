"""Tests for pool._transport._peer: the uid at the other end of a unix socket or a loopback TCP connection."""

from __future__ import annotations

import os
import socket

import pytest

from pool._transport._handshake import Refused
from pool._transport._peer import check_tcp_listener, check_tcp_peer, check_unix, loopback_host, trusted_uids, unix_peer

OTHER = os.getuid() + 12345
"""A uid this process is not."""


class TestPeer:
    def test_a_unix_peer_should_be_this_process_and_trusted_only_as_its_uid(self):
        a, b = socket.socketpair()
        with a, b:
            assert unix_peer(a) == (os.getpid(), os.getuid())
            check_unix(a, trusted_uids(), "the peer")
            with pytest.raises(Refused, match=f"uid {os.getuid()}"):
                check_unix(a, {OTHER}, "the peer")

    @pytest.mark.parametrize("family,host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
    def test_loopback_sockets_should_be_told_apart_by_owner(self, family, host):
        with socket.socket(family) as listener:
            listener.bind((host, 0))
            listener.listen()
            port = listener.getsockname()[1]
            check_tcp_listener(host, port, trusted_uids(), "the worker")
            with pytest.raises(Refused, match="does not trust"):
                check_tcp_listener(host, port, {OTHER}, "the worker")
            with socket.create_connection((host, port)) as client:
                accepted, _ = listener.accept()
                with accepted:
                    check_tcp_peer(host, client.getsockname()[1], trusted_uids(), "the caller")
                    with pytest.raises(Refused):
                        check_tcp_peer(host, client.getsockname()[1], {OTHER}, "the caller")

    def test_a_listener_on_the_wildcard_should_count_for_loopback(self):
        with socket.socket() as listener:
            listener.bind(("0.0.0.0", 0))
            listener.listen()
            check_tcp_listener("127.0.0.1", listener.getsockname()[1], trusted_uids(), "the worker")

    def test_nothing_at_an_address_should_be_refused(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]  # bound, never listening or connected: then closed
        with pytest.raises(Refused, match="cannot tell"):
            check_tcp_listener("127.0.0.1", port, trusted_uids(), "the worker")

    def test_loopback_host_should_name_only_loopback(self):
        assert loopback_host("localhost") == "127.0.0.1"
        assert loopback_host("[::1]") == "::1"
        assert loopback_host("127.0.0.2") == "127.0.0.2"
        assert loopback_host("10.0.0.1") is None
        assert loopback_host("example.com") is None
