"""leakypool: run async functions on a pool of worker processes, cheaply and safely.

    import pool

    @pool.routine
    async def add(x, y):
        return x + y

    async with pool.WorkerPool(spawn=2):
        assert await add(1, 2) == 3
"""

from __future__ import annotations

import os as _os

# The pool forks (then execs) its workers. grpc's fork handlers exist for
# children that keep using grpc without exec; ours never do, and the
# handlers would log noise on every spawn. Set before grpc is imported.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from ._calls import Task as Task  # noqa: E402
from ._connection import WorkerMetadata as WorkerMetadata  # noqa: E402
from ._errors import AdmissionRejected as AdmissionRejected  # noqa: E402
from ._errors import CapacityTimeout as CapacityTimeout  # noqa: E402
from ._errors import ConfigError as ConfigError  # noqa: E402
from ._errors import Deadlock as Deadlock  # noqa: E402
from ._errors import NoWorkersAvailable as NoWorkersAvailable  # noqa: E402
from ._errors import PoolClosed as PoolClosed  # noqa: E402
from ._errors import PoolError as PoolError  # noqa: E402
from ._errors import PoolWarning as PoolWarning  # noqa: E402
from ._errors import RemoteTraceback as RemoteTraceback  # noqa: E402
from ._errors import SerializationError as SerializationError  # noqa: E402
from ._errors import WorkerBroken as WorkerBroken  # noqa: E402
from ._errors import WorkerRejected as WorkerRejected  # noqa: E402
from ._pool import WorkerPool as WorkerPool  # noqa: E402
from ._routine import Routine as Routine  # noqa: E402
from ._routine import routine as routine  # noqa: E402

__version__ = "0.1.0"

__all__ = sorted(
    [
        "AdmissionRejected",
        "CapacityTimeout",
        "ConfigError",
        "Deadlock",
        "NoWorkersAvailable",
        "PoolClosed",
        "PoolError",
        "PoolWarning",
        "RemoteTraceback",
        "Routine",
        "SerializationError",
        "Task",
        "WorkerBroken",
        "WorkerMetadata",
        "WorkerPool",
        "WorkerRejected",
        "routine",
    ]
)


def _fixup_module_metadata() -> None:
    """Give public classes the public module name, so they pickle as pool.X (trio does the same)."""
    for name in __all__:
        obj = globals()[name]
        if getattr(obj, "__module__", "").startswith("pool."):
            obj.__module__ = __name__


_fixup_module_metadata()
del _fixup_module_metadata
