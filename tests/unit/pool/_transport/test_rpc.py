"""Tests for pool._transport._rpc: status names without grpc, addresses to bind, channel options, the worker record."""

from __future__ import annotations

import dataclasses
import ipaddress
import pickle
import uuid

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._transport import _rpc
from pool._transport._pieces import GRPC_MESSAGE_MAX_BYTES
from pool._transport._rpc import (
    CHANNEL_OPTIONS,
    SERVER_OPTIONS,
    TRANSIENT_CODES,
    WorkerMetadata,
    bind_address,
    status_name,
)


class TestStatusName:
    def test_status_name_should_match_grpc_for_every_code_grpc_defines(self):
        """Test that the module's own table spells every gRPC status as grpc does (a worker never imports grpc)."""
        assert {code.value[0]: status_name(code.value[0]) for code in grpc.StatusCode} == {
            code.value[0]: code.name for code in grpc.StatusCode
        }

    def test_named_codes_should_be_the_numbers_grpc_uses(self):
        """Test that the constants the worker answers with are the gRPC numbers of their names."""
        for name in ("RESOURCE_EXHAUSTED", "UNAVAILABLE", "FAILED_PRECONDITION", "UNIMPLEMENTED"):
            assert getattr(_rpc, name) == getattr(grpc.StatusCode, name).value[0]

    @given(st.integers())
    def test_status_name_should_never_raise_and_name_unknown_codes_by_number(self, code):
        """Test that any integer, negative or past the table, gets a name (a newer peer's code, a garbled one)."""
        name = status_name(code)
        if 0 <= code <= 16:
            assert name.isupper() and not name.startswith("CODE_")
        else:
            assert name == f"CODE_{code}"

    def test_transient_codes_should_be_real_names_and_exclude_hard_faults(self):
        """Test that only "not now" codes are transient: a worker that fails auth or speaks garbage is evicted."""
        names = {code.name for code in grpc.StatusCode}
        assert names >= TRANSIENT_CODES
        assert not {"UNAUTHENTICATED", "INTERNAL", "PERMISSION_DENIED", "UNIMPLEMENTED"} & TRANSIENT_CODES


class TestBindAddress:
    @pytest.mark.parametrize(
        ("host", "port", "address"),
        [
            ("127.0.0.1", 50051, "127.0.0.1:50051"),
            ("localhost", 1, "localhost:1"),
            ("::1", 8080, "[::1]:8080"),
            ("[::1]", 8080, "[::1]:8080"),  # already bracketed: not twice
            ("::", 0, "[::]:0"),
        ],
    )
    def test_bind_address_should_bracket_ipv6_hosts_only(self, host, port, address):
        """Test that an IPv6 host is bracketed once, and other hosts are left as they are."""
        assert bind_address(host, port) == address

    @given(st.ip_addresses(), st.integers(0, 65535))
    def test_bind_address_should_split_back_into_its_host_and_port(self, ip, port):
        """Test that the address parses back into the same host and port, for any IP of either family."""
        host, _, tail = bind_address(str(ip), port).rpartition(":")
        assert int(tail) == port
        assert ipaddress.ip_address(host.strip("[]")) == ip
        assert host.startswith("[") is (ip.version == 6)


class TestOptions:
    def test_channel_options_should_bound_what_an_unauthenticated_peer_makes_us_read(self):
        """Test that a channel reads no message over one piece and uses a fixed flow-control window."""
        options = dict(CHANNEL_OPTIONS)
        assert options["grpc.max_receive_message_length"] == GRPC_MESSAGE_MAX_BYTES
        assert options["grpc.http2.bdp_probe"] == 0
        assert 0 < options["grpc.http2.lookahead_bytes"] <= 16 << 20

    def test_server_options_should_hold_the_channel_options_and_accept_their_keepalive_pings(self):
        """Test that the server mirrors the channel, and allows pings at least as often as channels send them."""
        options = dict(SERVER_OPTIONS)
        assert dict(CHANNEL_OPTIONS).items() <= options.items()
        assert options["grpc.http2.min_ping_interval_without_data_ms"] <= options["grpc.keepalive_time_ms"]
        assert len(options) == len(SERVER_OPTIONS)  # no option given twice, with two values


class TestWorkerMetadata:
    def test_worker_metadata_should_be_a_frozen_public_record_with_empty_defaults(self):
        """Test that the record needs only uid and address, cannot be changed, and is named pool.WorkerMetadata."""
        uid = uuid.UUID(int=1)
        metadata = WorkerMetadata(uid, "127.0.0.1:1")
        assert (metadata.pid, metadata.version, metadata.tags, metadata.capacity) == (0, "", frozenset(), 0)
        assert not metadata.tls and not metadata.local
        with pytest.raises(dataclasses.FrozenInstanceError):
            metadata.address = "elsewhere:1"  # type: ignore[misc]
        assert WorkerMetadata.__module__ == "pool" and pool.WorkerMetadata is WorkerMetadata

    def test_worker_metadata_should_pickle_and_hash_by_value(self):
        """Test that equal records are one key of a dict, and one survives pickling (it crosses to the registry)."""
        one = WorkerMetadata(uuid.UUID(int=2), "unix:/tmp/s", pid=9, tags=frozenset({"gpu"}), capacity=4, local=True)
        again = pickle.loads(pickle.dumps(one))
        assert again == one and hash(again) == hash(one)
        assert b"pool._transport" not in pickle.dumps(one)  # pickled under its public name
