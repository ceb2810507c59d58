"""Tests for the layout DESIGN.md promises: the process boundary is a folder boundary."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
POOL = ROOT / "pool"
WORKER = POOL / "_worker"

DISPATCHING_SIDE = {
    "_admission", "_connection", "_fanout", "_fleet", "_local_worker", "_membership", "_placement",
    "_pool", "_relay", "_roster", "_stats", "_tls", "_jobs", "_observe", "_metrics", "_grpc_channel",
    "_unix_channel",
}
"""Modules of the dispatching process that the worker side must not import."""


def imported_modules(path: pathlib.Path) -> set[str]:
    """Absolute dotted names ``path`` imports (relative imports resolved against its package)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package = path.relative_to(ROOT).parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules_outside_worker() -> list[pathlib.Path]:
    paths = [*POOL.rglob("*.py"), *(ROOT / "balancer").rglob("*.py"), *(ROOT / "backpressure").rglob("*.py")]
    return [p for p in paths if WORKER not in p.parents]


@pytest.mark.parametrize("path", modules_outside_worker(), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_outside_the_worker_package_should_import_it(path):
    """Test that the dispatching side (and shared code) never imports pool._worker."""
    assert not any(m == "pool._worker" or m.startswith("pool._worker.") for m in imported_modules(path)), path


@pytest.mark.parametrize("path", sorted(WORKER.rglob("*.py")), ids=lambda p: p.name)
def test_worker_package_should_import_only_what_both_sides_share(path):
    """Test that the worker side imports no dispatching-side module."""
    for module in imported_modules(path):
        parts = module.split(".")
        if parts[0] == "pool" and len(parts) > 1:
            assert parts[1] not in DISPATCHING_SIDE, f"{path.name} imports {module}"


def test_zeroconf_should_be_imported_by_the_lan_module_only():
    """Test that one module owns the zeroconf dependency (it loads only when LAN discovery is used)."""
    importers = [p for p in POOL.rglob("*.py") if any(m.split(".")[0] == "zeroconf" for m in imported_modules(p))]
    assert importers == [POOL / "_discovery" / "_lan.py"]


def test_grpc_should_be_imported_by_the_grpc_transport_modules_only():
    """Test that grpc stays behind the TCP transport: a pool of spawned workers and the workers never load it."""
    importers = {p.relative_to(POOL).as_posix() for p in POOL.rglob("*.py") if "grpc" in {m.split(".")[0] for m in imported_modules(p)}}
    assert importers == {"_grpc_channel.py", "_worker/_grpc_server.py", "_tls.py"}  # _tls: for TLS credentials only


@pytest.mark.parametrize(
    "code",
    [
        "import pool._worker._main",  # what a worker on a unix socket (and the template) imports
        "import pool; pool.WorkerPool; pool.routine; pool.map",  # a pool that spawns its workers
    ],
)
def test_no_grpc_should_load_for_local_work(code):
    """Test that neither side of a pool of local workers pays for importing grpc (~20-50 ms at start-up)."""
    check = f"import sys; {code}; sys.exit('grpc' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT, timeout=120).returncode == 0


def test_the_dispatching_side_should_name_worker_modules_only_to_start_a_worker_process():
    """Test that pool._worker appears outside its package only as a process's entry point, never imported.

    A fresh-interpreter template is ``python -m pool._worker._template``; a
    template forked from the pool's process enters the same module by name
    once it is no longer the pool (pool/_template.py); a template preloads
    the gRPC server for TCP workers (pool/_fleet.py).
    """
    naming = {p.relative_to(POOL).as_posix() for p in modules_outside_worker() if '"pool._worker' in p.read_text()}
    assert naming <= {"_template.py", "_fleet.py"}


def test_the_layout_should_have_the_promised_sub_packages():
    """Test DESIGN.md's layout: the worker side, discovery and jobs are sub-packages of pool."""
    for name in ("_worker", "_discovery", "_jobs"):
        assert (POOL / name / "__init__.py").is_file(), name


def test_checker_should_see_a_forbidden_import(tmp_path):
    """Test that the import checker itself catches an upward import (so the tests above can fail)."""
    fake = POOL / "_fake_probe_module.py"
    try:
        fake.write_text("from ._worker import _service\n")
        assert "pool._worker" in imported_modules(fake)
    finally:
        fake.unlink()
