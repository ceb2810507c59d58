"""Client credentials for workers that serve TLS (mutual TLS)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

from .._base import public
from .._errors import ConfigError

if TYPE_CHECKING:
    import grpc

DEFAULT_SERVER_NAME: Final[str] = "leakypool-worker"
"""The name a worker certificate made by ``tools/make_certs.py`` carries (SAN DNS)."""


@dataclasses.dataclass(frozen=True)
class TlsCredentials:
    """What a pool presents to, and expects from, workers that serve TLS.

    Workers run shipped code, so off loopback they require TLS with client
    certificates: the pool proves itself with ``cert``/``key`` (signed by
    the CA the workers trust, ``--tls-client-ca``) and checks each worker
    against ``ca``. Workers found on a LAN are dialled by IP address, so
    their certificates are checked against ``server_name`` (the name the
    cluster's worker certificate carries) instead of the address.

    Args:
        ca: PEM file of the CA that signed the workers' certificates.
        cert: PEM file of this client's certificate chain.
        key: PEM file of this client's private key.
        server_name: Name to verify worker certificates against; None
            verifies the dialled address itself.

    Raises:
        ConfigError: a file cannot be read, or cert and key come alone.
    """

    ca: str
    cert: str | None = None
    key: str | None = None
    server_name: str | None = DEFAULT_SERVER_NAME

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigError("TlsCredentials: expected cert and key together, got only one")
        for field in ("ca", "cert", "key"):
            path = getattr(self, field)
            if path is not None:
                _read(path, field)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """gRPC channel credentials built from the files."""
        import grpc  # only a pool that dials TLS workers loads grpc's credentials

        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca, "ca"),
            private_key=_read(self.key, "key") if self.key else None,
            certificate_chain=_read(self.cert, "cert") if self.cert else None,
        )

    def channel_options(self) -> tuple[tuple[str, str], ...]:
        """Channel options: verify workers against ``server_name``."""
        return (("grpc.ssl_target_name_override", self.server_name),) if self.server_name else ()


def _read(path: str, field: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(
            f"TlsCredentials.{field}: expected a readable PEM file, got {path!r} ({exc.strerror})"
        ) from None


public(TlsCredentials)
