"""Tests for pool._transport._tls: client credentials for TLS workers, over a real TLS gRPC server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import pathlib
from collections.abc import AsyncIterator

import grpc
import pytest

from pool._errors import ConfigError
from pool._transport._tls import DEFAULT_SERVER_NAME, TlsCredentials

ROOT = pathlib.Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    """A CA, a worker certificate for ``leakypool-worker`` (not for 127.0.0.1) and a client's (tools/make_certs.py)."""
    spec = importlib.util.spec_from_file_location("make_certs", ROOT / "tools" / "make_certs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_certs(tmp_path_factory.mktemp("certs"), ["10.77.0.10"])


@contextlib.asynccontextmanager
async def tls_server(certs: dict[str, str]) -> AsyncIterator[str]:
    """A gRPC server on 127.0.0.1 serving the worker certificate and requiring a client certificate of the CA."""
    key = pathlib.Path(certs["worker_key"]).read_bytes()
    cert = pathlib.Path(certs["worker"]).read_bytes()
    ca = pathlib.Path(certs["ca"]).read_bytes()
    server = grpc.aio.server()
    port = server.add_secure_port(
        "127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=True)
    )
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


async def connects(address: str, credentials: TlsCredentials) -> bool:
    """Whether a channel with ``credentials`` gets through the TLS handshake: READY, or a failure (within 10 s)."""
    async with grpc.aio.secure_channel(
        address, credentials.channel_credentials(), options=credentials.channel_options()
    ) as channel:
        async with asyncio.timeout(10):
            state = channel.get_state(try_to_connect=True)
            while state not in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
                await channel.wait_for_state_change(state)
                state = channel.get_state(try_to_connect=True)
        return state == grpc.ChannelConnectivity.READY


class TestTlsCredentials:
    @pytest.mark.parametrize("which", ["cert", "key"])
    def test_init_should_raise_config_error_when_cert_or_key_comes_alone(self, certs, which):
        """Test that a client certificate without its key (or the reverse) is refused at once."""
        given = {"cert": certs["client"]} if which == "cert" else {"key": certs["client_key"]}
        with pytest.raises(ConfigError, match="cert and key together"):
            TlsCredentials(certs["ca"], **given)

    @pytest.mark.parametrize("field", ["ca", "cert", "key"])
    def test_init_should_raise_config_error_naming_the_field_when_a_file_cannot_be_read(self, certs, tmp_path, field):
        """Test that each unreadable file is reported at construction, with the argument it came from."""
        paths = {"ca": certs["ca"], "cert": certs["client"], "key": certs["client_key"]}
        paths[field] = str(tmp_path / "missing.pem")
        with pytest.raises(ConfigError, match=rf"TlsCredentials\.{field}: expected a readable PEM file"):
            TlsCredentials(**paths)

    def test_channel_options_should_override_the_target_name_when_a_server_name_is_set(self, certs):
        """Test that workers are checked against the cluster name by default, and the address with None."""
        assert TlsCredentials(certs["ca"]).channel_options() == (
            ("grpc.ssl_target_name_override", DEFAULT_SERVER_NAME),
        )
        assert TlsCredentials(certs["ca"], server_name="other").channel_options() == (
            ("grpc.ssl_target_name_override", "other"),
        )
        assert TlsCredentials(certs["ca"], server_name=None).channel_options() == ()

    async def test_channel_should_reach_a_tls_worker_when_it_presents_the_client_certificate(self, certs):
        """Test that the credentials verify the worker by its cluster name and prove the client (mutual TLS)."""
        credentials = TlsCredentials(certs["ca"], certs["client"], certs["client_key"])
        async with tls_server(certs) as address:
            assert await connects(address, credentials)

    async def test_channel_should_fail_when_the_worker_certificate_does_not_name_the_address_dialled(self, certs):
        """Test that with server_name=None the dialled address itself is verified (the certificate lacks 127.0.0.1)."""
        credentials = TlsCredentials(certs["ca"], certs["client"], certs["client_key"], server_name=None)
        async with tls_server(certs) as address:
            assert not await connects(address, credentials)

    async def test_channel_should_fail_when_no_client_certificate_is_given(self, certs):
        """Test that a worker requiring client certificates turns away credentials with only the CA."""
        async with tls_server(certs) as address:
            assert not await connects(address, TlsCredentials(certs["ca"]))
