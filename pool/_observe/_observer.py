"""A pool's observation port: its metrics, and the ``/status`` document (``WorkerPool(metrics_port=)``)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from ._http import ObservationServer, Rates

_log = logging.getLogger("leakypool.metrics")

STORE_READ_S: Final[float] = 2.0
"""How long a scrape waits for the store (which retries a lost connection for ``store_retry``): then the last figures."""


class PoolObserver:
    """A pool's metrics and its observation port (``WorkerPool(metrics_port=...)``).

    Args:
        pool: The pool observed (a `WorkerPool`).
        port: TCP port on 127.0.0.1 (0: any free one; see `address`).
    """

    def __init__(self, pool: Any, port: int) -> None:
        from ._metrics import PoolMetrics

        self._pool = pool
        self._port = port
        self._rates = Rates()
        self._job_counts: dict[str, int] | None = None
        self._paused: list[str] | None = None  # paused queues (None: no store)
        self.metrics = PoolMetrics(pool.stats, lambda: self._job_counts, paused=lambda: self._paused or ())
        self._server = ObservationServer(self.metrics.exposition, self.status, self._refresh)

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
            await self._server.start("127.0.0.1", self._port)
        except OSError as exc:
            raise ConfigError(f"metrics_port: cannot bind 127.0.0.1:{self._port}: {exc.strerror or exc}") from None

    async def aclose(self) -> None:
        await self._server.aclose()

    async def _refresh(self) -> None:
        """Job counts from the store (every process's jobs); the last ones if it is away."""
        if not self._pool.has_store:
            return
        from .._errors import StoreError

        try:
            async with asyncio.timeout(STORE_READ_S):
                self._job_counts = await self._pool.jobs.counts()
        except (StoreError, TimeoutError) as exc:
            _log.warning("observation port: job counts unavailable (%s)", exc)
        await self._refresh_paused()

    async def _refresh_paused(self) -> None:
        """The paused queues, from the store (every process's pauses); the last ones if it is away."""
        from .._errors import ConfigError, StoreError

        try:
            async with asyncio.timeout(STORE_READ_S):
                self._paused = await self._pool.jobs.paused()
        except (StoreError, ConfigError, TimeoutError) as exc:
            _log.debug("observation port: paused queues unavailable (%s)", exc)

    async def status(self) -> dict[str, Any]:
        """What ``/status`` serves (see DESIGN.md: workers, queues, jobs, rates)."""
        s = self._pool.stats()
        states = await self._pool.worker_states(timeout=1.0)
        workers = []
        for uid, meta in sorted(self._pool.workers.items()):
            state = states.get(uid)
            workers.append({
                "uid": str(uid),
                "address": meta.address,
                "pid": meta.pid,
                "local": meta.local,
                "in_flight": None if state is None else state.in_flight,
                "capacity": meta.capacity if state is None else state.capacity,
                "idle_s": None if state is None else round(state.idle_seconds, 3),
                "accepting": None if state is None else state.accepting,
                "memory": None if state is None else state.memory_bytes,
                "loop_lag_s": None if state is None else round(state.loop_lag_seconds, 4),
            })
        return {
            "workers": workers,
            "calls": {
                "running": s.running,
                "waiting_for_worker": s.waiting_for_worker,
                "waiting_for_limits": s.waiting_for_limits,
                "dispatched": s.dispatched,
                "rejected": s.rejected,
                "capacity_timeouts": s.capacity_timeouts,
            },
            "queues": {name: {"running": g.running, "waiting": g.waiting} for name, g in s.limits.items()},
            "jobs": self._job_counts,
            "paused": self._paused,
            "rates": {"calls_per_s": round(self._rates.per_second(s.dispatched), 2)},
        }
