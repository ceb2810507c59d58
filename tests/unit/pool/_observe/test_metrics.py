"""Tests for the pool's lock-free metric updates: they expose what prometheus-client's own types would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from pool._observe._metrics import _LATENCY_BUCKETS, PoolMetrics, _Histogram
from pool._observe._stats import PoolStats

values = st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=60)


@given(values)
def test_histogram_should_match_prometheus_clients_own(samples):
    """Test bucket edges ("le": a value equal to a bound counts in it), cumulative counts and the sum."""
    ours = _Histogram()
    registry = CollectorRegistry()
    theirs = Histogram("h", "h", buckets=_LATENCY_BUCKETS, registry=registry)
    for value in [*samples, *_LATENCY_BUCKETS[:3]]:
        ours.observe(value)
        theirs.observe(value)
    family = next(iter(registry.collect()))
    expected = [(s.labels["le"], s.value) for s in family.samples if s.name == "h_bucket"]
    assert [(le, float(n)) for le, n in ours.cumulative()] == expected
    assert abs(ours.sum - registry.get_sample_value("h_sum")) < 1e-6


def test_exposition_should_parse_with_per_routine_labels_and_no_key_or_workflow_labels():
    stats = PoolStats(
        2,
        2,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        {
            "queue 'tenants' key 'acme'": _Gate(1, 2),
            "queue 'tenants' key 'globex'": _Gate(1, 0),
            "queue 'tenants' (total)": _Gate(2, 2),
            "workflow 'convert:/a.pdf'": _Gate(1, 0),
        },
    )
    metrics = PoolMetrics(lambda: stats, lambda: {"pending": 3})
    metrics.accepted("add", 0.0)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    queue = {tuple(sorted(s.labels.items())): s.value for s in families["leakypool_queue_calls"].samples}
    assert queue == {(("queue", "tenants"), ("state", "running")): 2, (("queue", "tenants"), ("state", "waiting")): 2}
    assert families["leakypool_jobs"].samples[0].value == 3
    text = metrics.exposition().decode()
    assert "acme" not in text and "convert:" not in text  # high-cardinality values never become labels


class _Gate:
    def __init__(self, running: int, waiting: int) -> None:
        self.running, self.waiting = running, waiting
