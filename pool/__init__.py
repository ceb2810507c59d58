"""leakypool: run async functions on a pool of worker processes, cheaply and safely.

import pool

@pool.routine
async def add(x, y):
    return x + y

async with pool.WorkerPool(spawn=2):
    assert await add(1, 2) == 3
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._base import lazy_attribute
from ._errors import AdmissionRejected as AdmissionRejected
from ._errors import CapacityTimeout as CapacityTimeout
from ._errors import ConfigError as ConfigError
from ._errors import Deadlock as Deadlock
from ._errors import NoWorkersAvailable as NoWorkersAvailable
from ._errors import PicklingError as PicklingError
from ._errors import PoolClosed as PoolClosed
from ._errors import PoolError as PoolError
from ._errors import PoolWarning as PoolWarning
from ._errors import ProvisionError as ProvisionError
from ._errors import RemoteTraceback as RemoteTraceback
from ._errors import SerializationError as SerializationError
from ._errors import StoreError as StoreError
from ._errors import VersionMismatch as VersionMismatch
from ._errors import WorkerBroken as WorkerBroken
from ._errors import WorkerInitError as WorkerInitError
from ._errors import WorkerRejected as WorkerRejected
from ._errors import WorkerStartError as WorkerStartError
from ._errors import WorkflowHalted as WorkflowHalted
from ._version import __version__ as __version__

if TYPE_CHECKING:  # loaded on first use: see _LAZY
    from ._call import Task
    from ._discovery import DiscoveryEvent as DiscoveryEvent
    from ._discovery import DiscoveryLike as DiscoveryLike
    from ._discovery import LanDiscovery, StoreDiscovery
    from ._discovery import LocalDiscovery as LocalDiscovery
    from ._discovery import StaticDiscovery as StaticDiscovery
    from ._dispatch import Queue, RateLimit, map
    from ._fleet import CommandProvisioner, Provisioner, SubprocessProvisioner, WorkerRequest
    from ._jobs import Job as Job
    from ._jobs import JobStore as JobStore
    from ._jobs import PostgresStore as PostgresStore
    from ._jobs import SQLiteStore as SQLiteStore
    from ._observe import GateStats, PoolDebug, PoolStats, Progress
    from ._pool import Executor, WorkerPool
    from ._routine import CallOptions as CallOptions
    from ._routine import Routine as Routine
    from ._routine import routine as routine
    from ._transport import TlsCredentials, WorkerMetadata

__all__ = [
    "AdmissionRejected",
    "CallOptions",
    "CapacityTimeout",
    "CommandProvisioner",
    "ConfigError",
    "Deadlock",
    "DiscoveryEvent",
    "DiscoveryLike",
    "Executor",
    "GateStats",
    "Job",
    "JobStore",
    "LanDiscovery",
    "LocalDiscovery",
    "NoWorkersAvailable",
    "PicklingError",
    "PoolClosed",
    "PoolDebug",
    "PoolError",
    "PoolStats",
    "PoolWarning",
    "PostgresStore",
    "Progress",
    "ProvisionError",
    "Provisioner",
    "Queue",
    "RateLimit",
    "RemoteTraceback",
    "Routine",
    "SQLiteStore",
    "SerializationError",
    "StaticDiscovery",
    "StoreDiscovery",
    "StoreError",
    "SubprocessProvisioner",
    "Task",
    "TlsCredentials",
    "VersionMismatch",
    "WorkerBroken",
    "WorkerInitError",
    "WorkerMetadata",
    "WorkerPool",
    "WorkerRejected",
    "WorkerRequest",
    "WorkerStartError",
    "WorkflowHalted",
    "map",
    "routine",
]


_LAZY: dict[str, str] = {
    "CallOptions": "._routine",
    "DiscoveryEvent": "._discovery",
    "DiscoveryLike": "._discovery",
    "Executor": "._pool",
    "GateStats": "._observe",
    "Job": "._jobs",
    "JobStore": "._jobs",
    "LanDiscovery": "._discovery",
    "LocalDiscovery": "._discovery",
    "PoolDebug": "._observe",
    "PoolStats": "._observe",
    "PostgresStore": "._jobs",
    "Progress": "._observe",
    "Queue": "._dispatch",
    "Routine": "._routine",
    "SQLiteStore": "._jobs",
    "StaticDiscovery": "._discovery",
    "Task": "._call",
    "TlsCredentials": "._transport",
    "WorkerMetadata": "._transport",
    "WorkerPool": "._pool",
    "RateLimit": "._dispatch",
    "map": "._dispatch",
    "routine": "._routine",
    "CommandProvisioner": "._fleet",
    "Provisioner": "._fleet",
    "StoreDiscovery": "._discovery",
    "SubprocessProvisioner": "._fleet",
    "WorkerRequest": "._fleet",
}
"""Public names whose modules load on first use, so ``import pool`` is cheap: a
worker imports only the side it runs (no gRPC client, no jobs, no zeroconf),
and a pool only what it uses (zeroconf ~0.1 s, the job machinery)."""


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, _LAZY, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _fixup_module_metadata() -> None:
    """Give public classes the public module name, so they pickle as pool.X (trio does the same)."""
    for name in __all__:
        obj = globals().get(name)
        if getattr(obj, "__module__", "").startswith("pool."):
            obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
