"""The executor side of `WorkerPool`: ``executor()``, a ``concurrent.futures`` view of the open pool.

Kept apart so the pool's own module keeps to wiring the layers and its
lifecycle (as `_jobs` does for jobs); the view itself is in `pool._executor._feed`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from .._base._tasks import TaskOwner
from .._call._calls import call_outcome
from .._config._settings import PoolConfig
from .._dispatch._path import CallPath
from .._dispatch._roster import Roster
from .._errors import PoolClosed
from .._executor._feed import Feed, PoolExecutor


class PoolExecutors:
    """`WorkerPool`'s executor methods (a mixin: the pool sets the attributes below)."""

    _path: CallPath
    _config: PoolConfig
    _tasks: TaskOwner
    _roster: Roster
    call: Callable[..., Any]

    def executor(self) -> PoolExecutor:
        """A ``concurrent.futures.Executor`` over this open pool, for ``loop.run_in_executor`` and libraries.

        Call it on the pool's loop, inside the ``async with``. Its ``submit``
        never blocks and queues without limit; its ``shutdown`` leaves the
        pool open; when the pool closes, its unfinished work ends in
        `PoolClosed` (see docs/from-concurrent-futures.md).

        Raises:
            PoolClosed: the pool is not open.
        """
        return PoolExecutor(self._feed(Feed()))

    def _feed(self, feed: Feed) -> Feed:
        """Attach an executor's waiting line to this open pool (on its loop); its runners are the pool's tasks."""
        if self._path.state != "open":
            raise PoolClosed(f"executor() needs an open pool; this one is {self._path.state}")
        feed.attach(
            functools.partial(call_outcome, self._path),
            self._tasks.spawn,
            is_open=lambda: self._path.state == "open",
            workers=self._roster.__len__,
            per_worker=1 + self._config.plain_prefetch,  # one running, a call for each place in a worker's line
        )
        return feed
