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
import bisect
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from .._errors import ConfigError
from .._transport import leakypool_pb2 as pb

if TYPE_CHECKING:
    from .._transport import OutgoingCall
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


class _Histogram:
    """Bucket counts and a sum, updated without a lock (only the pool's event loop writes them)."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(_LATENCY_BUCKETS) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(_LATENCY_BUCKETS, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        """``(le, count of values <= le)`` per bucket, as the exposition writes them."""
        from prometheus_client.utils import floatToGoString

        running = 0
        out: list[tuple[str, float]] = []
        for bound, count in zip((*map(floatToGoString, _LATENCY_BUCKETS), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


class _Routine:
    """What one routine's calls did."""

    __slots__ = ("duration", "outcomes", "rejected", "timeouts", "wait")

    def __init__(self) -> None:
        self.outcomes = dict.fromkeys(OUTCOMES, 0)
        self.duration = _Histogram()
        self.wait = _Histogram()
        self.rejected = 0
        self.timeouts = 0


class PoolMetrics:
    """Metrics of one pool, in a registry of its own.

    Per-call updates are plain integer and list operations on the pool's
    event loop (no lock, no label lookup in prometheus-client: a few
    hundred nanoseconds); prometheus-client turns them into its metric
    families, and into text, only when scraped.

    Args:
        stats: The pool's `PoolStats` now (read at each scrape).
        jobs: Job counts by state, as last read from the store (None: no store).
        purged: Finished jobs this process purged (retention; None: no store).
        paused: The paused queues' names, as last read from the store.
    """

    def __init__(
        self,
        stats: Callable[[], PoolStats],
        jobs: Callable[[], dict[str, int] | None],
        purged: Callable[[], int | None] = lambda: None,
        paused: Callable[[], Iterable[str]] = tuple,
    ) -> None:
        try:
            from prometheus_client import CollectorRegistry
        except ImportError:
            raise ConfigError("metrics_port needs prometheus-client: pip install 'leakypool[metrics]'") from None
        self.routines: dict[str, _Routine] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(_Calls(self.routines))
        self.registry.register(_Gauges(stats, jobs, purged))
        self.registry.register(_Paused(paused))

    def _of(self, name: str) -> _Routine:
        routine = self.routines.get(name)
        if routine is None:
            routine = self.routines[name] = _Routine()
        return routine

    def accepted(self, name: str, admitted_at: float) -> float:
        """A worker accepted the call; returns the accept time (monotonic)."""
        now = time.monotonic()
        self._of(name).wait.observe(now - admitted_at)
        return now

    def ended(self, call: OutgoingCall, name: str, accepted_at: float) -> None:
        routine = self._of(name)
        routine.outcomes[outcome(call)] += 1
        routine.duration.observe(time.monotonic() - accepted_at)

    def rejected(self, name: str) -> None:
        self._of(name).rejected += 1

    def timed_out(self, name: str) -> None:
        self._of(name).timeouts += 1

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class _Calls:
    """The per-routine counters and histograms, as metric families (built when scraped)."""

    def __init__(self, routines: dict[str, _Routine]) -> None:
        self._routines = routines

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        calls = CounterMetricFamily(
            "leakypool_calls",
            "Calls ended, by routine and outcome (ok, error, cancelled, lost).",
            labels=["routine", "outcome"],
        )
        duration = HistogramMetricFamily(
            "leakypool_call_duration_seconds", "From a worker's accept to the call's end.", labels=["routine"]
        )
        wait = HistogramMetricFamily(
            "leakypool_queue_wait_seconds",
            "From admission to a worker's accept (queue and limits).",
            labels=["routine"],
        )
        rejected = CounterMetricFamily(
            "leakypool_admission_rejected", "Calls refused by admission (ceiling or full queue).", labels=["routine"]
        )
        timeouts = CounterMetricFamily(
            "leakypool_capacity_timeouts", "Calls that waited past their dispatch deadline.", labels=["routine"]
        )
        for name, r in sorted(self._routines.items()):
            for result, count in r.outcomes.items():
                if count:
                    calls.add_metric([name, result], count)
            duration.add_metric([name], r.duration.cumulative(), r.duration.sum)
            wait.add_metric([name], r.wait.cumulative(), r.wait.sum)
            rejected.add_metric([name], r.rejected)
            timeouts.add_metric([name], r.timeouts)
        yield from (calls, duration, wait, rejected, timeouts)


class _Gauges:
    """Gauges read from the pool when scraped (a custom collector: nothing to keep in step)."""

    def __init__(
        self,
        stats: Callable[[], PoolStats],
        jobs: Callable[[], dict[str, int] | None],
        purged: Callable[[], int | None] = lambda: None,
    ) -> None:
        self._stats = stats
        self._jobs = jobs
        self._purged = purged

    def describe(self) -> list[Any]:
        return []  # unchecked collector: names are known only when collected

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = self._stats()
        running = GaugeMetricFamily("leakypool_calls_running", "Calls a worker accepted and runs now (jobs too).")
        running.add_metric([], s.running)
        yield running
        waiting = GaugeMetricFamily(
            "leakypool_calls_waiting", "Calls waiting, for a worker or for a limit.", labels=["for"]
        )
        waiting.add_metric(["worker"], s.waiting_for_worker)
        waiting.add_metric(["limits"], s.waiting_for_limits)
        yield waiting
        workers = GaugeMetricFamily(
            "leakypool_workers", "Workers in the pool, local (spawned) or found.", labels=["kind"]
        )
        workers.add_metric(["local"], s.local_workers)
        workers.add_metric(["found"], s.workers - s.local_workers)
        yield workers
        builds = GaugeMetricFamily(
            "leakypool_workers_by_build",
            'Workers in the pool by the build they run ("": unversioned).',
            labels=["build"],
        )
        for build, count in sorted(s.builds.items()):
            builds.add_metric([build], count)
        yield builds
        grown = CounterMetricFamily("leakypool_workers_grown", "Workers started under load.")
        grown.add_metric([], s.grown)
        yield grown
        shrunk = CounterMetricFamily("leakypool_workers_shrunk", "Workers grown under load that left after idling.")
        shrunk.add_metric([], s.shrunk)
        yield shrunk
        recycled = CounterMetricFamily(
            "leakypool_worker_recycled",
            "Spawned workers that exited on purpose and were replaced, by reason (tasks, memory, timeout).",
            labels=["reason"],
        )
        for reason, count in recycled_by_reason(s.recycled).items():
            recycled.add_metric([reason], count)
        yield recycled
        failures = CounterMetricFamily("leakypool_provision_failures", "Worker requests the provisioner failed.")
        failures.add_metric([], s.provision_failures)
        yield failures
        dispatched = CounterMetricFamily("leakypool_calls_dispatched", "Calls a worker accepted (jobs too).")
        dispatched.add_metric([], s.dispatched)
        yield dispatched
        queues = GaugeMetricFamily(
            "leakypool_queue_calls", "Calls per queue, running or waiting.", labels=["queue", "state"]
        )
        for name, gate in _by_queue(s).items():
            queues.add_metric([name, "running"], gate[0])
            queues.add_metric([name, "waiting"], gate[1])
        yield queues
        counts = self._jobs()
        if counts is not None:
            jobs = GaugeMetricFamily("leakypool_jobs", "Jobs in the store by state (all processes).", labels=["state"])
            for state, n in sorted(counts.items()):
                jobs.add_metric([state], n)
            yield jobs
        if (n_purged := self._purged()) is not None:
            purged = CounterMetricFamily("leakypool_jobs_purged", "Finished jobs this process purged (keep_finished).")
            purged.add_metric([], n_purged)
            yield purged


class _Paused:
    """``leakypool_queue_paused{queue}``: 1 per paused queue (queue names are configured names, few)."""

    def __init__(self, paused: Callable[[], Iterable[str]]) -> None:
        self._paused = paused

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        paused = GaugeMetricFamily(
            "leakypool_queue_paused", "1 for each paused queue (kept in the job store).", labels=["queue"]
        )
        for name in sorted(self._paused()):
            paused.add_metric([name], 1)
        yield paused


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


RECYCLE_REASONS: Final[tuple[str, ...]] = ("tasks", "memory", "timeout")
"""Why a worker retires on purpose: its task limit, its memory limit, a hard timeout (always exported, 0 or more)."""


def recycled_by_reason(recycled: Mapping[str, int]) -> dict[str, int]:
    """Recycles by reason, every known reason present (0 if none yet), any other reason after them."""
    return {reason: recycled.get(reason, 0) for reason in RECYCLE_REASONS} | dict(recycled)
