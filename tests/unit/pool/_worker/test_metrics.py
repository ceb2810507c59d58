"""Tests for pool._worker._metrics: a worker's Prometheus counters and gauges, read back from its exposition.

The real ``--metrics-port`` over HTTP is in tests/integration/observe/test_worker_metrics.py.
"""

from __future__ import annotations

import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pool._errors import ConfigError
from pool._transport._proto import leakypool_pb2 as pb
from pool._worker._metrics import WorkerMetrics


def samples(metrics: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The exposition parsed: (sample name, sorted labels) -> value."""
    found = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def state(**fields: float) -> pb.WorkerState:
    return pb.WorkerState(**fields)  # type: ignore[arg-type]


class TestWorkerMetrics:
    def test_ended_should_count_each_outcome_under_its_label_and_time_it(self):
        """Test the outcome labels (a generator's STOP is "ok", YIELD never ends a call) and the duration histogram."""
        metrics = WorkerMetrics(lambda: state())
        for kind, seconds in (
            (pb.Outcome.RETURN, 0.001),
            (pb.Outcome.STOP, 0.002),
            (pb.Outcome.RAISE, 0.5),
            (pb.Outcome.CANCELLED, 2.0),
            (pb.Outcome.CANCELLED, 2.0),
            (pb.Outcome.YIELD, 0.0),  # not a final outcome: counted as ok rather than lost
        ):
            metrics.ended(kind, seconds)
        found = samples(metrics)
        assert found[("leakypool_worker_tasks_total", (("outcome", "ok"),))] == 3
        assert found[("leakypool_worker_tasks_total", (("outcome", "error"),))] == 1
        assert found[("leakypool_worker_tasks_total", (("outcome", "cancelled"),))] == 2
        assert found[("leakypool_worker_task_duration_seconds_count", ())] == 6
        assert found[("leakypool_worker_task_duration_seconds_sum", ())] == pytest.approx(4.503)
        assert found[("leakypool_worker_task_duration_seconds_bucket", (("le", "0.001"),))] == 2  # 0.0 and 0.001

    def test_refused_should_count_by_reason_named_from_the_verdict(self):
        """Test that verdict names become the documented reasons, and an unknown one its lower-case name."""
        metrics = WorkerMetrics(lambda: state())
        for verdict in ("BUSY", "BUSY", "DRAINING", "HOOK_FAILED", "SOMETHING_NEW"):
            metrics.refused(verdict)
        found = samples(metrics)
        assert {
            labels[0][1]: value for (name, labels), value in found.items() if name == "leakypool_worker_rejected_total"
        } == {
            "backpressure": 2,
            "draining": 1,
            "hook_error": 1,
            "something_new": 1,
        }

    def test_gauges_should_read_the_state_at_each_scrape(self):
        """Test that the load gauges are read from the worker's state when scraped, not when made."""
        now = {"in_flight": 1, "capacity": 4, "memory_bytes": 1000, "memory_fraction": 0.25}
        metrics = WorkerMetrics(lambda: state(**now))
        first = samples(metrics)
        assert first[("leakypool_worker_in_flight", ())] == 1
        assert first[("leakypool_worker_capacity", ())] == 4
        assert first[("leakypool_worker_memory_bytes", ())] == 1000
        assert first[("leakypool_worker_host_memory_fraction", ())] == 0.25
        assert first[("leakypool_worker_loop_lag_seconds", ())] == 0
        assert first[("leakypool_worker_task_duration_p99_seconds", ())] == 0
        now.update(in_flight=3, loop_lag_seconds=0.5, latency_p99_seconds=1.5)
        second = samples(metrics)
        assert second[("leakypool_worker_in_flight", ())] == 3
        assert second[("leakypool_worker_loop_lag_seconds", ())] == 0.5
        assert second[("leakypool_worker_task_duration_p99_seconds", ())] == 1.5

    def test_two_workers_metrics_should_live_in_registries_of_their_own(self):
        """Test that a second WorkerMetrics in one process neither clashes with nor counts into the first."""
        a, b = WorkerMetrics(lambda: state()), WorkerMetrics(lambda: state())
        a.ended(pb.Outcome.RETURN, 0.1)
        assert samples(a)[("leakypool_worker_tasks_total", (("outcome", "ok"),))] == 1
        assert ("leakypool_worker_tasks_total", (("outcome", "ok"),)) not in samples(b)

    def test_init_should_raise_config_error_naming_the_extra_when_prometheus_client_is_missing(self, monkeypatch):
        """Test that --metrics-port without the ``metrics`` extra fails with the pip command to run."""
        monkeypatch.setitem(sys.modules, "prometheus_client", None)  # `import` raises ImportError
        with pytest.raises(ConfigError, match=r"leakypool\[metrics\]"):
            WorkerMetrics(lambda: state())
