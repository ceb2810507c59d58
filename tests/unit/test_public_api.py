"""The public names the project promises (docs/concepts.md, docs/jobs.md), and only those under __all__."""

from __future__ import annotations

import importlib
import inspect

import pytest


@pytest.mark.parametrize("package", ["pool", "balancer", "backpressure"])
def test_all_should_be_sorted_and_resolvable(package):
    """Test that __all__ is sorted and every name in it exists."""
    module = importlib.import_module(package)
    assert list(module.__all__) == sorted(module.__all__)
    for name in module.__all__:
        assert hasattr(module, name), name


@pytest.mark.parametrize("package", ["pool", "balancer", "backpressure"])
def test_public_classes_should_report_their_public_module(package):
    """Test that classes say ``pool.X``, not ``pool._private.X`` (pickles and docs rely on it)."""
    module = importlib.import_module(package)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj):
            assert obj.__module__ == package, f"{package}.{name} has __module__ {obj.__module__}"


def test_design_names_should_be_importable():
    """Test the public names of the pool's front."""
    import pool
    from backpressure import BackpressureContext, TaskCountBackpressure  # noqa: F401
    from balancer import NoWorkersAvailable, PriorityLoadBalancer, RoundRobinLoadBalancer  # noqa: F401

    for name in ("routine", "WorkerPool", "LanDiscovery", "LocalDiscovery", "AdmissionRejected"):
        assert hasattr(pool, name), name


def test_leaf_packages_should_not_import_pool():
    """Test that balancer/ and backpressure/ stay embeddable: no import of pool."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    for package in ("balancer", "backpressure"):
        for path in (root / package).glob("*.py"):
            text = path.read_text()
            assert "import pool" not in text and "from pool" not in text, path


def test_durable_job_names_should_be_importable():
    """Test the public names of durable jobs (docs/jobs.md)."""
    import pool

    for name in ("Job", "JobStore", "SQLiteStore", "StoreError", "ConfigError", "CapacityTimeout"):
        assert name in pool.__all__ and hasattr(pool, name), name
    assert pool.Job.__module__ == "pool" and pool.JobStore.__module__ == "pool"


def test_import_should_not_load_optional_machinery():
    """Test that `import pool` stays light: zeroconf and the job store load on first use."""
    import subprocess
    import sys

    code = "import sys, pool; print(sorted(m for m in ('zeroconf', 'sqlite3', 'pool._jobs') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_job_lifecycle_names_should_be_importable():
    """Test the public names of the job lifecycle (docs/job-lifecycle.md)."""
    import pool

    assert "RateLimit" in pool.__all__ and pool.RateLimit.__module__ == "pool"
    assert callable(pool.WorkerPool.schedule)
    for option in ("delay", "run_at", "priority", "connection"):
        assert option in pool.Routine.__init__.__globals__["CallOptions"].__dataclass_fields__, option
    assert "rate" in pool.Queue.__dataclass_fields__ and isinstance(pool.Job.run_at, property)


def test_capacity_names_should_be_importable():
    """Test that the names of capacity beyond this host (docs/capacity.md) are public."""
    import pool

    for name in ("Provisioner", "WorkerRequest", "SubprocessProvisioner", "CommandProvisioner", "StoreDiscovery"):
        assert name in pool.__all__ and hasattr(pool, name), name
    assert isinstance(pool.CommandProvisioner(["true"]), pool.Provisioner)
    assert isinstance(pool.SubprocessProvisioner(), pool.Provisioner)
