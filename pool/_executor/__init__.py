"""The ``concurrent.futures`` machinery both executors share (as CPython keeps its own in ``Lib/concurrent/futures/``).

    _feed        the waiting line both executors share, and the view over a running pool (``p.executor()``)
    _map         ``map``'s chunks, ordering and ``buffersize`` window
    _calls       the plain calls an executor ships: a callable and its arguments as one routine call

The public surface's, below `pool._pool`: a feed is attached to a running pool by callables, so nothing here
knows WorkerPool; ``p.executor()`` and `pool.Executor` (a WorkerPool on a thread of its own) are `pool._pool`'s.
"""

from __future__ import annotations

from ._feed import Feed as Feed
from ._feed import FeedExecutor as FeedExecutor
from ._feed import PoolExecutor as PoolExecutor
from ._feed import interpreter_exiting as interpreter_exiting
from ._feed import submit_once as submit_once

__all__ = ["Feed", "FeedExecutor", "PoolExecutor", "interpreter_exiting", "submit_once"]
