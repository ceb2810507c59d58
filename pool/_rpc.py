"""What both ends of the gRPC service share: its name, channel options, status codes, the worker record.

Both the dispatching side (`_connection`, discovery probes) and the worker
side (`_worker`) import this module; it imports neither.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Final

import grpc

SERVICE: Final[str] = "leakypool.v1.Worker"
"""The gRPC service name; methods are /leakypool.v1.Worker/<Method>."""

CHANNEL_OPTIONS: Final[tuple[tuple[str, int], ...]] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    # Notice a peer that vanished without closing its socket (a host that
    # lost power) within ~20 s instead of TCP's minutes.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""Options for every channel to a worker (and, mirrored, for its server)."""

SERVER_OPTIONS: Final[tuple[tuple[str, int], ...]] = CHANNEL_OPTIONS + (
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.so_reuseport", 0),
)
"""Server options: the channel's, plus accepting its keepalive pings."""

RESOURCE_EXHAUSTED: Final[int] = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
UNAVAILABLE: Final[int] = grpc.StatusCode.UNAVAILABLE.value[0]
FAILED_PRECONDITION: Final[int] = grpc.StatusCode.FAILED_PRECONDITION.value[0]
UNIMPLEMENTED: Final[int] = grpc.StatusCode.UNIMPLEMENTED.value[0]

TRANSIENT_CODES: Final[frozenset[str]] = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"})
"""gRPC codes a worker may answer "not now" with (DESIGN: rotate, keep the worker); any other is hard."""

_NAMES: Final[dict[int, str]] = {status.value[0]: status.name for status in grpc.StatusCode}


def status_name(code: int) -> str:
    """The name of a numeric gRPC status code, e.g. ``"UNAVAILABLE"``."""
    return _NAMES.get(code, f"CODE_{code}")


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
    """

    uid: uuid.UUID
    address: str
    pid: int = 0
    version: str = ""
    tags: frozenset[str] = frozenset()
    capacity: int = 0
    tls: bool = False
    local: bool = False
