"""How the pool dials a worker: decided by the pool, never by the worker's record (issue 43).

A record says where a worker is and whether it serves TLS, and anyone who
can write where records live (a registry table, a LAN's multicast) can
write one. If the record's ``tls`` flag chose the transport, a planted
record saying ``"tls": false`` would be dialled in plaintext by a pool
that holds TLS credentials. So, as Dask's ``Security`` refuses a plain
``tcp://`` address once TLS is configured:

    unix socket, loopback     as the record says (TLS if it serves TLS); the handshake and
                              the peer's uid guard this host
    off loopback, credentials always TLS; a record that says plaintext is skipped (logged)
    off loopback, none        plaintext only with ``WorkerPool(insecure=True)``
                              (anyone on the path can then read and change every frame)
"""

from __future__ import annotations

from .._config import is_loopback
from .._transport import TlsCredentials, WorkerMetadata


class Route:
    """How to dial one worker: with these TLS credentials, or None for plaintext."""

    __slots__ = ("credentials",)

    def __init__(self, credentials: TlsCredentials | None) -> None:
        self.credentials = credentials

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Route) and other.credentials is self.credentials

    def __hash__(self) -> int:
        return id(self.credentials)

    def __repr__(self) -> str:
        return f"Route({self.credentials!r})"


def route(worker: WorkerMetadata, credentials: TlsCredentials | None, *, insecure: bool) -> Route | str:
    """How to dial ``worker``; or why the pool will not (a line for the log)."""
    if worker.address.startswith("unix:") or is_loopback(worker.address.rpartition(":")[0]):
        if not worker.tls:
            return Route(None)
        if credentials is None:
            return "it serves TLS and the pool has no credentials"
        return Route(credentials)
    if credentials is not None:
        if not worker.tls:
            return (
                "its record says it serves plaintext, and this pool dials every worker off loopback with TLS "
                "(a record does not choose the transport)"
            )
        return Route(credentials)
    if worker.tls:
        return "it serves TLS and the pool has no credentials"
    if not insecure:
        return (
            "it serves plaintext off loopback, where anyone on the path can read and change every frame; "
            "give the pool credentials=, or insecure=True (LEAKYPOOL_INSECURE=1) to allow it"
        )
    return Route(None)
