"""The dispatching side's Prometheus metrics (the ``metrics`` extra: prometheus-client).

Counters and histograms are updated where calls end; gauges (running,
waiting, workers, jobs) are read from the pool when scraped, so a pool
with metrics pays a few dictionary updates per call and nothing while idle.
Each pool has a registry of its own (two pools in one process do not
collide). Labels stay low-cardinality: routine name, outcome, reason,
queue name; never a key value or a job id.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._proto import leakypool_pb2 as pb

if TYPE_CHECKING:
    from ._session import OutgoingCall
    from ._stats import PoolStats

OUTCOMES = ("ok", "error", "cancelled", "lost")
"""``leakypool_calls_total{outcome}``: returned, raised, cancelled (by its caller or remotely), worker lost."""

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


def outcome(call: OutgoingCall) -> str:
    """How a finished call ended, without unpickling anything."""
    final = call.final
    if call.cancelled_here:
        return "cancelled"
    if final is None or isinstance(final, BaseException):
        return "lost"
    kind = final.outcome.kind if final.HasField("outcome") else pb.Outcome.RETURN
    if kind == pb.Outcome.RAISE:
        return "error"
    return "cancelled" if kind == pb.Outcome.CANCELLED else "ok"


class PoolMetrics:
    """Metrics of one pool, in a registry of its own.

    Args:
        stats: The pool's `PoolStats` now (read at each scrape).
        jobs: Job counts by state, as last read from the store (None: no store).
    """

    def __init__(self, stats: Callable[[], PoolStats], jobs: Callable[[], dict[str, int] | None]) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise ConfigError("metrics_port needs prometheus-client: pip install 'leakypool[metrics]'") from None
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(
            "leakypool_calls", "Calls ended, by routine and outcome (ok, error, cancelled, lost).",
            ["routine", "outcome"], registry=self.registry,
        )
        self.duration = Histogram(
            "leakypool_call_duration_seconds", "From a worker's accept to the call's end.", ["routine"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.queue_wait = Histogram(
            "leakypool_queue_wait_seconds", "From admission to a worker's accept (queue and limits).", ["routine"],
            buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.rejected = Counter(
            "leakypool_admission_rejected", "Calls refused by admission (ceiling or full queue).", ["routine"],
            registry=self.registry,
        )
        self.timeouts = Counter(
            "leakypool_capacity_timeouts", "Calls that waited past their dispatch deadline.", ["routine"],
            registry=self.registry,
        )
        self.registry.register(_Gauges(stats, jobs))

    def accepted(self, name: str, admitted_at: float) -> float:
        """A worker accepted the call; returns the accept time (monotonic)."""
        now = time.monotonic()
        self.queue_wait.labels(name).observe(now - admitted_at)
        return now

    def ended(self, call: OutgoingCall, name: str, accepted_at: float) -> None:
        self.calls.labels(name, outcome(call)).inc()
        self.duration.labels(name).observe(time.monotonic() - accepted_at)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _Gauges:
    """Gauges read from the pool when scraped (a custom collector: nothing to keep in step)."""

    def __init__(self, stats: Callable[[], PoolStats], jobs: Callable[[], dict[str, int] | None]) -> None:
        self._stats = stats
        self._jobs = jobs

    def describe(self) -> list[Any]:
        return []  # unchecked collector: names are known only when collected

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self._stats()
        running = GaugeMetricFamily("leakypool_calls_running", "Calls a worker accepted and runs now (jobs too).")
        running.add_metric([], s.running)
        yield running
        waiting = GaugeMetricFamily("leakypool_calls_waiting", "Calls waiting, for a worker or for a limit.",
                                    labels=["for"])
        waiting.add_metric(["worker"], s.waiting_for_worker)
        waiting.add_metric(["limits"], s.waiting_for_limits)
        yield waiting
        workers = GaugeMetricFamily("leakypool_workers", "Workers in the pool, local (spawned) or found.",
                                    labels=["kind"])
        workers.add_metric(["local"], s.local_workers)
        workers.add_metric(["found"], s.workers - s.local_workers)
        yield workers
        grown = CounterMetricFamily("leakypool_workers_grown", "Workers started under load.")
        grown.add_metric([], s.grown)
        yield grown
        dispatched = CounterMetricFamily("leakypool_calls_dispatched", "Calls a worker accepted (jobs too).")
        dispatched.add_metric([], s.dispatched)
        yield dispatched
        queues = GaugeMetricFamily("leakypool_queue_calls", "Calls per queue, running or waiting.",
                                   labels=["queue", "state"])
        for name, gate in _by_queue(s).items():
            queues.add_metric([name, "running"], gate[0])
            queues.add_metric([name, "waiting"], gate[1])
        yield queues
        counts = self._jobs()
        if counts is not None:
            jobs = GaugeMetricFamily("leakypool_jobs", "Jobs in the store by state (all processes).",
                                     labels=["state"])
            for state, n in sorted(counts.items()):
                jobs.add_metric([state], n)
            yield jobs


def _by_queue(s: PoolStats) -> dict[str, tuple[int, int]]:
    """Running and waiting per queue, summed over its keys (neither a key nor a workflow id is a label)."""
    totals: dict[str, tuple[int, int]] = {}
    for name, gate in s.limits.items():
        if not name.startswith("queue ") or name.endswith("(total)"):
            continue
        queue = ast.literal_eval(name.removeprefix("queue ").split(" key ")[0])
        running, waiting = totals.get(queue, (0, 0))
        totals[queue] = (running + gate.running, waiting + gate.waiting)
    return totals
