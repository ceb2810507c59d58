"""What a worker says about itself when asked (the State RPC): its load, its lifecycle, its signals."""

from __future__ import annotations

import os
import time

from .._transport import INTERPRETER
from .._transport import leakypool_pb2 as pb
from .._version import __version__
from ._admission import WorkerAdmission
from ._lifecycle import Lifecycle
from ._signals import ResourceSignals


def worker_state(
    uid: str, capacity: int, admission: WorkerAdmission, lifecycle: Lifecycle, signals: ResourceSignals, build: str
) -> pb.WorkerState:
    """The State reply of worker ``uid`` now."""
    now = time.monotonic()
    return pb.WorkerState(
        uid=uid,
        pid=os.getpid(),
        in_flight=admission.in_flight,
        waiting=admission.parked,
        idle_seconds=(now - lifecycle.idle_since) if admission.in_flight == 0 else 0.0,
        capacity=capacity,
        accepting=admission.accepting,
        uptime_seconds=now - lifecycle.started,
        version=__version__,
        interpreter=INTERPRETER,
        build=build,
        memory_bytes=signals.memory_bytes or 0,
        memory_fraction=signals.memory_fraction or 0.0,
        loop_lag_seconds=signals.loop_lag_s,
        latency_p99_seconds=signals.p99(),
    )
