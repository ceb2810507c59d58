"""A pool's observation port: its metrics, and the ``/status`` document (``WorkerPool(metrics_port=)``)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from .._base import redacted
from ._http import ObservationServer, Rates
from ._metrics import recycled_by_reason

_log = logging.getLogger("leakypool.metrics")

STORE_READ_S: Final[float] = 2.0
"""How long a scrape waits for the store (which retries a lost connection for ``store_retry``): then the last figures."""

FAILED_SHOWN: Final[int] = 8
"""The latest failed jobs ``/status`` lists (``failed_jobs``)."""

ERROR_SHOWN_CHARS: Final[int] = 300
"""Characters of a failed job's error ``/status`` keeps."""


class PoolObserver:
    """A pool's metrics and its observation port (``WorkerPool(metrics_port=...)``).

    Args:
        pool: The pool observed (a `WorkerPool`).
        port: TCP port (0: any free one; see `address`).
        host: Address to bind (loopback unless the settings gave a token).
        token: Required of every request when set.
        names: Host names requests may give besides IP addresses and ``localhost``.
    """

    def __init__(
        self, pool: Any, port: int, host: str = "127.0.0.1", token: str = "", names: tuple[str, ...] = ()
    ) -> None:
        from ._metrics import PoolMetrics

        self._pool = pool
        self._port = port
        self._host = host
        self._rates = Rates()
        self._job_counts: dict[str, int] | None = None
        self._paused: list[str] | None = None  # paused queues (None: no store)
        self._failed: list[dict[str, Any]] | None = None
        self._failed_count: int | None = None  # the failed count when `_failed` was read
        self.metrics = PoolMetrics(
            pool.stats,
            lambda: self._job_counts,
            lambda: pool.jobs.purged if pool.has_store else None,
            paused=lambda: self._paused or (),
        )
        self._server = ObservationServer(self.metrics.exposition, self.status, self._refresh, token, names)

    @property
    def address(self) -> tuple[str, int] | None:
        return self._server.address

    async def start(self) -> None:
        """Serve on 127.0.0.1.

        Raises:
            ConfigError: the port cannot be bound (in use, or not allowed).
        """
        from .._errors import ConfigError

        try:
            await self._server.start(self._host, self._port)
        except OSError as exc:
            raise ConfigError(f"metrics_port: cannot bind {self._host}:{self._port}: {exc.strerror or exc}") from None

    async def aclose(self) -> None:
        await self._server.aclose()

    async def _refresh(self) -> None:
        """Job counts from the store (every process's jobs); the last ones if it is away."""
        if not self._pool.has_store:
            return
        await self._refresh_paused()
        from .._errors import StoreError

        try:
            async with asyncio.timeout(STORE_READ_S):
                counts = self._job_counts = await self._pool.jobs.counts()
                if self._failed is not None and counts.get("failed") == self._failed_count:
                    return  # no new failure: the list stands (the store is not asked to sort its failures again)
                failed = await self._pool.jobs.store.list("failed", FAILED_SHOWN, newest=True)
        except (StoreError, TimeoutError) as exc:
            _log.warning("observation port: job counts unavailable (%s)", exc)
            return
        self._failed_count = counts.get("failed")
        self._failed = [
            {
                "id": r.id,
                "routine": r.routine,
                "queue": r.queue,
                "attempts": r.attempts,
                "finished_at": r.finished_at,
                "error": redacted(r.error)[-ERROR_SHOWN_CHARS:],  # (whoever reaches the port: no passwords)
            }
            for r in failed
        ]

    async def _refresh_paused(self) -> None:
        """The paused queues, from the store (every process's pauses); the last ones if it is away."""
        from .._errors import ConfigError, StoreError

        try:
            async with asyncio.timeout(STORE_READ_S):
                self._paused = await self._pool.jobs.paused()
        except (StoreError, ConfigError, TimeoutError) as exc:
            _log.debug("observation port: paused queues unavailable (%s)", exc)

    async def status(self) -> dict[str, Any]:
        """What ``/status`` serves (docs/observability.md: workers, queues, jobs, rates)."""
        s = self._pool.stats()
        states = await self._pool.worker_states(timeout=1.0)
        workers = []
        for uid, meta in sorted(self._pool.workers.items()):
            state = states.get(uid)
            workers.append(
                {
                    "uid": str(uid),
                    "address": meta.address,
                    "pid": meta.pid,
                    "local": meta.local,
                    "build": meta.build,
                    "interpreter": meta.interpreter,
                    "in_flight": None if state is None else state.in_flight,
                    "capacity": meta.capacity if state is None else state.capacity,
                    "idle_s": None if state is None else round(state.idle_seconds, 3),
                    "accepting": None if state is None else state.accepting,
                    "memory": None if state is None else state.memory_bytes,
                    "loop_lag_s": None if state is None else round(state.loop_lag_seconds, 4),
                }
            )
        return {
            "kind": "pool",
            "time": round(time.time(), 3),
            "workers": workers,
            "calls": {
                "running": s.running,
                "waiting_for_worker": s.waiting_for_worker,
                "waiting_for_limits": s.waiting_for_limits,
                "dispatched": s.dispatched,
                "rejected": s.rejected,
                "capacity_timeouts": s.capacity_timeouts,
            },
            "recycled": recycled_by_reason(s.recycled),
            "queues": {name: {"running": g.running, "waiting": g.waiting} for name, g in s.limits.items()},
            "jobs": self._job_counts,
            "paused": self._paused,
            "failed_jobs": self._failed,
            "rates": {"calls_per_s": round(self._rates.per_second(s.dispatched), 2)},
        }
