"""A worker's Prometheus metrics (``--metrics-port``; the ``metrics`` extra: prometheus-client).

Counted where the service answers and finishes calls; the load and the
resource signals are read when scraped. Labels: outcome and reason only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from .._errors import ConfigError
from .._transport import leakypool_pb2 as pb

REASONS = {"BUSY": "backpressure", "DRAINING": "draining", "HOOK_FAILED": "hook_error"}
"""``leakypool_worker_rejected_total{reason}`` by admission verdict name."""

_OUTCOMES: dict[int, str] = {
    pb.Outcome.RETURN: "ok",
    pb.Outcome.STOP: "ok",
    pb.Outcome.RAISE: "error",
    pb.Outcome.CANCELLED: "cancelled",
}

_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics:
    """Metrics of one worker, in a registry of its own.

    Args:
        state: The worker's `WorkerState` now (read at each scrape).
    """

    def __init__(self, state: Callable[[], pb.WorkerState]) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise ConfigError("--metrics-port needs prometheus-client: pip install 'leakypool[metrics]'") from None
        self.registry = CollectorRegistry(auto_describe=True)
        self.tasks = Counter(
            "leakypool_worker_tasks", "Tasks this worker ended, by outcome.", ["outcome"], registry=self.registry
        )
        self.duration = Histogram(
            "leakypool_worker_task_duration_seconds",
            "From accept to the last outcome.",
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.rejected = Counter(
            "leakypool_worker_rejected",
            "Tasks refused, by reason (backpressure, draining, hook_error).",
            ["reason"],
            registry=self.registry,
        )
        self.registry.register(_Load(state))

    def ended(self, kind: int, seconds: float) -> None:
        self.tasks.labels(_OUTCOMES.get(kind, "ok")).inc()
        self.duration.observe(seconds)

    def refused(self, verdict: str) -> None:
        self.rejected.labels(REASONS.get(verdict, verdict.lower())).inc()

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _Load:
    """Gauges read from the worker's state when scraped."""

    def __init__(self, state: Callable[[], pb.WorkerState]) -> None:
        self._state = state

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        s = self._state()
        for name, text, value in (
            ("leakypool_worker_in_flight", "Tasks running on this worker now.", s.in_flight),
            ("leakypool_worker_capacity", "Tasks it takes at once (0: no task-count cap).", s.capacity),
            ("leakypool_worker_memory_bytes", "This process's resident memory.", s.memory_bytes),
            ("leakypool_worker_host_memory_fraction", "The host's memory in use, of its total.", s.memory_fraction),
            (
                "leakypool_worker_loop_lag_seconds",
                "How late the loop ran a timer lately, or how long a routine has held it.",
                s.loop_lag_seconds,
            ),
            ("leakypool_worker_task_duration_p99_seconds", "p99 of recent task durations.", s.latency_p99_seconds),
        ):
            gauge = GaugeMetricFamily(name, text)
            gauge.add_metric([], value)
            yield gauge
