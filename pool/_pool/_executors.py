"""The executor side of `WorkerPool`: ``executor()``, a ``concurrent.futures`` view of the open pool.

An object the pool owns (as it owns `_jobs.PoolJobs`); the view itself is in `pool._executor._feed`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .._errors import PoolClosed
from .._executor import Feed, PoolExecutor

if TYPE_CHECKING:
    from ._layers import Layers


class PoolExecutors:
    """`WorkerPool`'s executors: ``executor()``, and the feeds of a standalone `pool.Executor`, on its call path."""

    def __init__(self, layers: Layers) -> None:
        self._layers = layers

    def executor(self) -> PoolExecutor:
        """A ``concurrent.futures.Executor`` over this open pool, for ``loop.run_in_executor`` and libraries.

        Call it on the pool's loop, inside the ``async with``. Its ``submit``
        never blocks and queues without limit; its ``shutdown`` leaves the
        pool open; when the pool closes, its unfinished work ends in
        `PoolClosed` (see docs/from-concurrent-futures.md).

        Raises:
            PoolClosed: the pool is not open.
        """
        return PoolExecutor(self.attach(Feed()))

    def attach(self, feed: Feed) -> Feed:
        """Attach an executor's waiting line to this open pool (on its loop); its runners are the pool's tasks."""
        path = self._layers.path
        if path.state != "open":
            raise PoolClosed(f"executor() needs an open pool; this one is {path.state}")
        feed.attach(
            functools.partial(path.call, as_data=True),
            self._layers.tasks.spawn,
            is_open=lambda: path.state == "open",
            workers=self._layers.roster.__len__,
            per_worker=1 + self._layers.config.plain_prefetch,  # one running, a call for each place in a worker's line
        )
        return feed

    def finishing(self) -> None:
        """A standalone `pool.Executor` over this pool was shut down and waits for its calls: a worker lost from now
        on is replaced at once, not after the crash back-off (the pool closes once they are done)."""
        self._layers.fleet.hurry()
