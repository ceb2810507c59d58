"""Tests for pool._worker._native_threads: the variables set where the user set none, nothing when told 0."""

from __future__ import annotations

import os

import pytest

from pool._fleet._provisioning import native_threads
from pool._worker import _native_threads
from pool._worker._native_threads import VARIABLES, cap_native_threads


@pytest.fixture
def clean_env(monkeypatch):
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(_native_threads, "_LOADERS", ("a_module_nobody_imports",))  # no library loaded: env only


class TestCapNativeThreads:
    def test_cap_should_set_every_variable_the_user_did_not(self, clean_env, monkeypatch):
        """Test that the user's own OMP_NUM_THREADS wins and every other variable gets the cap."""
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        cap_native_threads(1)
        assert os.environ["OMP_NUM_THREADS"] == "3"
        assert all(os.environ[name] == "1" for name in VARIABLES if name != "OMP_NUM_THREADS")

    def test_cap_should_leave_everything_alone_when_zero(self, clean_env):
        cap_native_threads(0)
        assert not any(name in os.environ for name in VARIABLES)


class TestNativeThreads:
    @pytest.mark.parametrize(
        ("given", "workers", "cpus", "expected"),
        [(None, 2, 2, 1), (None, 1, 8, 8), (None, 3, 8, 2), (None, 16, 2, 1), (4, 2, 2, 4), (0, 2, 2, 0)],
    )
    def test_native_threads_should_share_the_cpus_among_the_workers_unless_given(
        self, monkeypatch, given, workers, cpus, expected
    ):
        """Test loky's rule (cpu_count() // n_jobs, at least 1), and that an explicit setting (0 included) wins."""
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        assert native_threads(given, workers) == expected


def test_cap_should_limit_a_library_already_loaded_and_spare_one_the_user_set(monkeypatch):
    """Test the run-time limit (a worker forked from a template that imported numpy): OpenBLAS to the cap; with
    OPENBLAS_NUM_THREADS set by the user, left as it is."""
    pytest.importorskip("numpy")
    from threadpoolctl import threadpool_info, threadpool_limits

    def openblas() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["internal_api"] == "openblas"]

    if not openblas():
        pytest.skip("this numpy has no OpenBLAS")
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with threadpool_limits(limits=None):  # (the sizes as they were, restored on the way out)
        before = openblas()
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
        cap_native_threads(1)
        assert openblas() == before
        monkeypatch.delenv("OPENBLAS_NUM_THREADS")
        cap_native_threads(1)
        assert openblas() == [1] * len(before)
