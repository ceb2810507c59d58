"""What both ends of the gRPC service share: its name, channel options, status codes, the worker record.

Both the dispatching side (`_connection`, discovery probes) and the worker
side (`_worker`) import this module; it imports neither, nor grpc itself
(a worker on a unix socket never loads grpc: see `_framing`).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Final

from .._base import public
from ._pieces import GRPC_MESSAGE_MAX_BYTES

SERVICE: Final[str] = "leakypool.v2.Worker"
"""The gRPC service name; methods are /leakypool.v2.Worker/<Method>, each a stream of bytes that opens with
the handshake (`_handshake`; v1 had unary State and Stop, and a secret in the metadata)."""

MAX_STREAMS_PER_CONNECTION: Final[int] = 32
"""Concurrent streams a worker serves on one connection (more wait for one to end)."""

CHANNEL_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.max_send_message_length", -1),
    # Checked against a message's announced length before it is buffered: nothing larger is read, not even
    # before the handshake (larger messages cross in pieces: `_pieces`).
    ("grpc.max_receive_message_length", GRPC_MESSAGE_MAX_BYTES),
    # A fixed flow-control window instead of one grown by BDP probing: what a peer can make this end buffer
    # before anything is read, authenticated or not (with probing, a 300 MB request grew a worker by ~9 MiB;
    # with 2 MiB, by ~2; large values over loopback gRPC measured alike, and 2 MiB/RTT is 10 GB/s at 0.2 ms).
    ("grpc.http2.bdp_probe", 0),
    ("grpc.http2.lookahead_bytes", 2 << 20),
    # Notice a peer that vanished without closing its socket (a host that
    # lost power) within ~20 s instead of TCP's minutes.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""Options for every channel to a worker (and, mirrored, for its server)."""

SERVER_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    *CHANNEL_OPTIONS,
    ("grpc.http2.min_ping_interval_without_data_ms", 5000),
    ("grpc.so_reuseport", 0),
    # Streams one connection may hold open at once (a pool needs its Dispatch stream and a few State, Stop
    # and nested calls): what one connection can make the worker hold is bounded (issue 51).
    ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
)
"""Server options: the channel's, plus accepting its keepalive pings and a cap on streams per connection."""

_NAMES: Final[tuple[str, ...]] = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
"""gRPC status code names by number (fixed by the gRPC spec, doc/statuscodes.md)."""

RESOURCE_EXHAUSTED: Final[int] = _NAMES.index("RESOURCE_EXHAUSTED")
UNAVAILABLE: Final[int] = _NAMES.index("UNAVAILABLE")
FAILED_PRECONDITION: Final[int] = _NAMES.index("FAILED_PRECONDITION")
UNIMPLEMENTED: Final[int] = _NAMES.index("UNIMPLEMENTED")

MISMATCH_MESSAGE: Final[str] = "another version"
"""A worker's Reject of a call of another build, or whose code by value was made by another Python (UNAVAILABLE:
it is not full)."""

LATE_MESSAGE: Final[str] = "past its start-by time"
"""A worker's Reject of a job's call that would start after its start-by time (UNAVAILABLE; issue 54): the job
goes back to the store unstarted."""

TRANSIENT_CODES: Final[frozenset[str]] = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})
"""gRPC codes a worker may answer "not now" with (DESIGN: rotate, keep the worker); any other is hard."""


def status_name(code: int) -> str:
    """The name of a numeric gRPC status code, e.g. ``"UNAVAILABLE"``."""
    return _NAMES[code] if 0 <= code < len(_NAMES) else f"CODE_{code}"


def bind_address(host: str, port: int) -> str:
    """``host:port``, with an IPv6 host in brackets."""
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


@dataclasses.dataclass(frozen=True)
class WorkerMetadata:
    """What the pool knows of a worker; what balancers read from ``context.workers``.

    Attributes:
        uid: Stable for the worker's life; balancers order by it.
        address: ``host:port`` to dial.
        pid: Its process id (on its own host).
        version: leakypool version it runs.
        tags: Labels an operator gave it (``--tags``).
        capacity: Tasks it takes at once (0 = unlimited or unknown).
        tls: Whether it serves TLS.
        local: Whether this pool spawned it.
        interpreter: The Python it runs ("cpython-3.13"; "" when its record does not say): a call whose
            code was pickled by value by another is not offered to it.
        build: The build of the code it runs (``--build``; "": unversioned): a call of another build is not
            offered to it.
    """

    uid: uuid.UUID
    address: str
    pid: int = 0
    version: str = ""
    tags: frozenset[str] = frozenset()
    capacity: int = 0
    tls: bool = False
    local: bool = False
    interpreter: str = ""
    build: str = ""


public(WorkerMetadata)
