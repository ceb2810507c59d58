"""The ``concurrent.futures`` family (as CPython keeps its own in ``Lib/concurrent/futures/``).

    _standalone  pool.Executor: a WorkerPool on a thread and loop of its own, for plain synchronous code
    _feed        the waiting line both executors share, and the view over a running pool (``p.executor()``)
    _map         ``map``'s chunks, ordering and ``buffersize`` window
    _calls       the plain calls an executor ships: a callable and its arguments as one routine call

The public surface's: built on `pool._pool`'s WorkerPool and on the layers below it.
"""
