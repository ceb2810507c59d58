"""Tests for a worker's resource signals and how admission hands them to its hook."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from backpressure import BackpressureContext
from pool._worker._admission import Verdict, WorkerAdmission
from pool._worker._signals import LATENCY_WINDOW, ResourceSignals, host_memory_fraction, rss_bytes


@given(lags=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=30))
def test_lag_should_be_the_latest_or_what_is_left_of_a_larger_one(lags):
    signals = ResourceSignals()
    for lag in lags:
        before = signals.loop_lag_s
        signals.lagged(lag)
        assert signals.loop_lag_s == max(lag, before * 0.5)
        assert signals.loop_lag_s >= lag


def test_recent_durations_should_be_bounded_and_copied_once_per_change():
    signals = ResourceSignals()
    for i in range(LATENCY_WINDOW + 10):
        signals.finished(float(i))
    recent = signals.recent()
    assert len(recent) == LATENCY_WINDOW and recent[0] == 10.0 and signals.recent() is recent
    signals.finished(1.0)
    assert signals.recent() is not recent and signals.recent()[-1] == 1.0
    ordered = sorted(signals.latencies)
    assert signals.p99() == ordered[-(-99 * LATENCY_WINDOW // 100) - 1]  # nearest rank
    assert sum(d <= signals.p99() for d in ordered) >= 0.99 * LATENCY_WINDOW


def test_memory_readings_should_be_plausible_on_linux():
    assert rss_bytes() > 2**20
    assert 0 < host_memory_fraction() < 1


def test_admission_should_give_the_hook_the_signals():
    seen: list[BackpressureContext] = []
    signals = ResourceSignals()
    signals.memory_fraction, signals.loop_lag_s = 0.5, 0.25
    signals.finished(0.1)
    admission = WorkerAdmission(lambda ctx: seen.append(ctx) or False, signals=signals)
    assert admission.decide(None) is Verdict.ACCEPT
    assert (seen[0].memory_fraction, seen[0].loop_lag_s, seen[0].recent_latencies_s) == (0.5, 0.25, (0.1,))
    bare = WorkerAdmission(lambda ctx: seen.append(ctx) or False)
    bare.decide(None)
    assert seen[1] == BackpressureContext(0, None)  # as wool builds it
