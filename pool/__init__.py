"""leakypool: run async functions on a pool of worker processes, cheaply and safely.

    import pool

    @pool.routine
    async def add(x, y):
        return x + y

    async with pool.WorkerPool(spawn=2):
        assert await add(1, 2) == 3
"""

from __future__ import annotations

from ._calls import Task as Task
from ._discovery import DiscoveryEvent as DiscoveryEvent
from ._discovery import DiscoveryLike as DiscoveryLike
from ._discovery import LocalDiscovery as LocalDiscovery
from ._discovery import StaticDiscovery as StaticDiscovery
from ._errors import AdmissionRejected as AdmissionRejected
from ._errors import CapacityTimeout as CapacityTimeout
from ._errors import ConfigError as ConfigError
from ._errors import Deadlock as Deadlock
from ._errors import NoWorkersAvailable as NoWorkersAvailable
from ._errors import PoolClosed as PoolClosed
from ._errors import PoolError as PoolError
from ._errors import PoolWarning as PoolWarning
from ._errors import RemoteTraceback as RemoteTraceback
from ._errors import SerializationError as SerializationError
from ._errors import StoreError as StoreError
from ._errors import WorkerBroken as WorkerBroken
from ._errors import WorkerRejected as WorkerRejected
from ._errors import WorkerStartError as WorkerStartError
from ._errors import WorkflowHalted as WorkflowHalted
from ._fanout import map as map
from ._limits import GateStats as GateStats
from ._limits import Queue as Queue
from ._progress import Progress as Progress
from ._stats import PoolStats as PoolStats
from ._pool import WorkerPool as WorkerPool
from ._routine import Routine as Routine
from ._routine import routine as routine
from ._rpc import WorkerMetadata as WorkerMetadata
from ._tls import TlsCredentials as TlsCredentials
from ._version import __version__ as __version__

__all__ = sorted(
    [
        "AdmissionRejected",
        "CapacityTimeout",
        "ConfigError",
        "DiscoveryEvent",
        "DiscoveryLike",
        "LanDiscovery",
        "LocalDiscovery",
        "StaticDiscovery",
        "TlsCredentials",
        "Deadlock",
        "NoWorkersAvailable",
        "PoolClosed",
        "PoolError",
        "PoolWarning",
        "RemoteTraceback",
        "Routine",
        "SerializationError",
        "StoreError",
        "Job",
        "JobStore",
        "PostgresStore",
        "SQLiteStore",
        "Task",
        "WorkerBroken",
        "WorkerMetadata",
        "WorkerPool",
        "WorkerRejected",
        "WorkerStartError",
        "WorkflowHalted",
        "GateStats",
        "PoolStats",
        "Progress",
        "Queue",
        "map",
        "routine",
    ]
)


_LAZY = {
    "LanDiscovery": "._discovery._lan",
    "Job": "._jobs",
    "JobStore": "._jobs",
    "PostgresStore": "._jobs",
    "SQLiteStore": "._jobs",
}
"""Public names whose modules load on first use: zeroconf (~0.1 s) and the job
machinery (sqlite3) are needed by few pools and by no worker."""


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    obj = getattr(importlib.import_module(module, __name__), name)
    obj.__module__ = __name__
    globals()[name] = obj
    return obj


def _fixup_module_metadata() -> None:
    """Give public classes the public module name, so they pickle as pool.X (trio does the same)."""
    for name in __all__:
        obj = globals().get(name)
        if getattr(obj, "__module__", "").startswith("pool."):
            obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
