"""WorkerPool: wiring the layers together, its lifecycle, and what it offers beyond calls.

    _worker_pool  WorkerPool: entry and exit, calls, and the public methods of what it owns
    _layers       the layers it wires together (membership, fleet, call path, scheduler), started and stopped
    _jobs         submit, schedule and the job book (a pool with a store)
    _executors    ``executor()``: a concurrent.futures view of the open pool
    _views        stats, workers, pids: what the pool shows of itself
    _standalone   pool.Executor: a WorkerPool on a thread and loop of its own, for plain synchronous code

The public surface's: it may use any layer below it.
"""

from __future__ import annotations

from ._standalone import Executor as Executor
from ._worker_pool import WorkerPool as WorkerPool
from ._worker_pool import attach_feed as attach_feed
from ._worker_pool import finishing as finishing

__all__ = ["Executor", "WorkerPool", "attach_feed", "finishing"]
