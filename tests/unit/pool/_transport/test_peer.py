"""Tests for pool._transport._peer: the uid at the other end of a unix socket or a loopback TCP connection."""

from __future__ import annotations

import os
import socket

import pytest

from pool._transport._handshake import Refused
from pool._transport._peer import (
    check_tcp_listener,
    check_tcp_peer,
    check_unix,
    loopback_host,
    tcp_owner,
    trusted_uids,
    unix_peer,
)

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
                    caller = (host, client.getsockname()[1])
                    check_tcp_peer(caller, [(host, port)], trusted_uids(), "the caller")
                    with pytest.raises(Refused):
                        check_tcp_peer(caller, [(host, port)], {OTHER}, "the caller")

    def test_a_connection_should_be_found_by_its_four_tuple_not_its_port(self):
        """Test issue 51 finding 5: two sockets share one local port (to two destinations, as Linux allows for
        ephemeral ports); each is found by its own four-tuple, and a tuple no connection has finds nothing."""
        with socket.socket() as one, socket.socket() as two:
            for listener in (one, two):
                listener.bind(("127.0.0.1", 0))
                listener.listen()
            with socket.socket() as a, socket.socket() as b:
                for s in (a, b):
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                a.bind(("127.0.0.1", 0))
                b.bind(a.getsockname())
                a.connect(one.getsockname())
                b.connect(two.getsockname())
                shared = a.getsockname()
                assert b.getsockname() == shared
                assert tcp_owner(shared, one.getsockname(), listening=False) == os.getuid()
                assert tcp_owner(shared, two.getsockname(), listening=False) == os.getuid()
                with socket.socket() as unused:
                    unused.bind(("127.0.0.1", 0))
                    assert tcp_owner(shared, unused.getsockname(), listening=False) is None
                    with pytest.raises(Refused, match="cannot tell"):
                        check_tcp_peer(shared, [unused.getsockname()], trusted_uids(), "the caller")

    def test_a_listener_on_the_wildcard_should_count_for_loopback(self):
        with socket.socket() as listener:
            listener.bind(("0.0.0.0", 0))
            listener.listen()
            check_tcp_listener("127.0.0.1", listener.getsockname()[1], trusted_uids(), "the worker")

    def test_nothing_at_an_address_should_be_refused(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]  # bound, never listening or connected: then closed
        with pytest.raises(ConnectionRefusedError, match="nothing listens"):
            check_tcp_listener("127.0.0.1", port, trusted_uids(), "the worker")

    def test_loopback_host_should_name_only_loopback(self):
        assert loopback_host("localhost") == "127.0.0.1"
        assert loopback_host("[::1]") == "::1"
        assert loopback_host("127.0.0.2") == "127.0.0.2"
        assert loopback_host("10.0.0.1") is None
        assert loopback_host("example.com") is None
