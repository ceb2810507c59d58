"""Tests for pool._worker._state: the State reply a worker builds from its admission, lifecycle and signals.

Real `WorkerAdmission`, `Lifecycle` and `ResourceSignals`, no loop needed: the reply is read off them.
"""

from __future__ import annotations

import logging
import os
import time

from hypothesis import given
from hypothesis import strategies as st

from pool._base._tasks import TaskOwner
from pool._version import __version__
from pool._worker._admission import WorkerAdmission
from pool._worker._lifecycle import Lifecycle
from pool._worker._signals import ResourceSignals
from pool._worker._state import worker_state

UID = "00000000-0000-0000-0000-000000000007"


async def _no_streams() -> None:
    pass


class Worker:
    """The three parts the State reply reads, as a service holds them."""

    def __init__(self) -> None:
        self.signals = ResourceSignals()
        self.admission = WorkerAdmission(None, signals=self.signals)
        self.lifecycle = Lifecycle(
            self.admission,
            TaskOwner("test worker", logging.getLogger("test")),
            idle_timeout=0,
            max_lifetime=0,
            cancel_all=lambda: None,
            end_streams=_no_streams,
        )

    def state(self, capacity: int = 4):
        return worker_state(UID, capacity, self.admission, self.lifecycle, self.signals, "")


class TestWorkerState:
    def test_worker_state_should_name_this_process_and_its_version_when_asked(self):
        """Test that the reply carries the uid and capacity given, this process's pid and the running version."""
        state = Worker().state(capacity=3)
        assert (state.uid, state.pid, state.capacity, state.version) == (UID, os.getpid(), 3, __version__)
        assert state.accepting

    def test_worker_state_should_count_idle_time_only_when_nothing_is_in_flight(self):
        """Test that an idle worker reports how long it has been idle, and a busy one 0."""
        worker = Worker()
        worker.lifecycle.idle_since = time.monotonic() - 30.0
        idle = worker.state().idle_seconds
        assert 30.0 <= idle < 60.0
        worker.admission.admit()
        assert worker.state().idle_seconds == 0.0
        assert worker.state().in_flight == 1

    def test_worker_state_should_report_parked_calls_as_waiting_and_a_draining_worker_as_not_accepting(self):
        """Test the load fields: calls in flight, those parked on a nested call, and whether it takes more."""
        worker = Worker()
        for _ in range(3):
            worker.admission.admit()
        worker.admission.park()
        worker.admission.accepting = False
        state = worker.state()
        assert (state.in_flight, state.waiting, state.accepting) == (3, 1, False)

    def test_worker_state_should_measure_uptime_from_the_lifecycle_start(self):
        """Test that uptime is the time since the lifecycle began, not since the call."""
        worker = Worker()
        worker.lifecycle.started = time.monotonic() - 100.0
        assert 100.0 <= worker.state().uptime_seconds < 200.0

    def test_worker_state_should_report_zeros_when_memory_cannot_be_read(self):
        """Test that signals a platform cannot give (None) are sent as 0, and the lag and p99 as measured."""
        worker = Worker()
        worker.signals.memory_bytes = None
        worker.signals.memory_fraction = None
        worker.signals.lagged(0.25)
        for seconds in (0.1, 0.2, 0.9):
            worker.signals.finished(seconds)
        state = worker.state()
        assert (state.memory_bytes, state.memory_fraction) == (0, 0.0)
        assert state.loop_lag_seconds == 0.25
        assert state.latency_p99_seconds == 0.9

    def test_worker_state_should_report_memory_when_it_was_sampled(self):
        """Test that the sampled memory readings go into the reply as they are."""
        worker = Worker()
        worker.signals.memory_bytes = 123 << 20
        worker.signals.memory_fraction = 0.5
        state = worker.state()
        assert (state.memory_bytes, state.memory_fraction) == (123 << 20, 0.5)

    @given(in_flight=st.integers(0, 50), idle_for=st.floats(0.0, 1e4))
    def test_worker_state_should_never_report_idle_time_while_a_call_runs(self, in_flight, idle_for):
        """Test the invariant a pool's idle view relies on: idle_seconds > 0 only with nothing in flight."""
        worker = Worker()
        worker.lifecycle.idle_since = time.monotonic() - idle_for
        for _ in range(in_flight):
            worker.admission.admit()
        state = worker.state()
        assert state.idle_seconds >= 0.0
        assert (state.idle_seconds > 0.0) <= (in_flight == 0)
        assert state.in_flight == in_flight
