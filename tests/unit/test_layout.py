"""Tests for the layout DESIGN.md promises: layers in the tree, imports flowing one way, no circle.

The dispatching process has three layers under its public surface (deciding,
talking to workers, being observed), each a sub-package of ``pool``; the
worker process is a folder of its own. These tests read every module's
imports (``TYPE_CHECKING`` ones too: a type-only import is still a
dependency a reader must follow) and check them against `ALLOWED`.
"""

from __future__ import annotations

import ast
import pathlib
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
POOL = ROOT / "pool"
WORKER = POOL / "_worker"
PACKAGES = ("pool", "balancer", "backpressure")

MAX_MODULE_LINES = 400
"""A module is one job (STYLE.md): past this, split it by what it owns, not by a cut at a line number.

Measured on the tree as `ruff format` lays it out. The formatter (one argument a line for a call that does
not fit) pushed four modules past this bound for a while (it stood at 440); they were split along their seams
instead: PostgreSQL's group-committed writes, a placement's course, a worker's preflight (issue 36)."""

LEAVES = frozenset(
    {
        "pool._errors",
        "pool._config",
        "pool._places",
        "pool._parse",
        "pool._version",
        "pool._base._redact",
        "balancer",
        "backpressure",
    }
)
"""Imported from anywhere: the error tree, settings, the version, password redaction (settings echo what they
refuse), and the two embeddable leaf packages."""

SURFACE = frozenset(
    {
        "pool",
        "pool._pool",
        "pool._pool_jobs",
        "pool._routine",
        "pool._cli",
        "pool._executor",
        "pool._executor_calls",
        "pool._executor_feed",
        "pool._executor_map",
        "pool._pool_executor",
        "pool._pool_views",
        "pool._call_options",
        "pool.joblib",
    }
)
"""The public surface: it wires the layers together, so it may import any of them."""

ALLOWED: Mapping[str, frozenset[str]] = {
    "pool._base": frozenset(),
    "pool._transport": frozenset({"pool._base"}),
    "pool._discovery": frozenset({"pool._transport", "pool._base"}),
    "pool._observe": frozenset({"pool._transport", "pool._base"}),
    "pool._fleet": frozenset({"pool._transport", "pool._base"}),
    "pool._jobs": frozenset({"pool._transport", "pool._base"}),
    "pool._dispatch": frozenset({"pool._transport", "pool._discovery", "pool._observe", "pool._base"}),
    "pool._worker": frozenset({"pool._transport", "pool._discovery", "pool._observe", "pool._base"}),
}
"""Layer -> the layers it may import (besides itself and `LEAVES`). Nothing imports upward:
surface -> dispatch -> transport -> base; jobs, fleet and observe beside dispatch, below the surface."""

WORKER_MAY_NOT_IMPORT = frozenset(
    {
        "pool._transport._connection",
        "pool._transport._unix_channel",
        "pool._transport._grpc_channel",
        "pool._transport._tls",
        "pool._observe._observer",
        "pool._observe._metrics",
        "pool._observe._status_view",
        "pool._observe._progress",
        "pool._observe._stats",
    }
)
"""Dispatching-side modules inside layers both processes share: the worker imports only what both sides use."""


UNIT_TESTS = ROOT / "tests" / "unit"

IT = "tests/integration/"
UT = "tests/unit/pool/"
"""Prefixes for the table below (the covering files are named in full, so a reader can open them)."""
COVERED_ELSEWHERE: Mapping[str, str] = {
    "pool/_worker/_state.py": "the State RPC: tests/integration/test_responsiveness.py, test_plain.py (worker_states())",
    "pool/_call_options.py": "tests/unit/pool/test_routine.py (options are checked where they are set: decoration, options())",
    # The root and the leaf packages' fronts: what they export is the public API.
    "pool/__init__.py": "the public names, lazy attributes, __module__ fix-up: tests/unit/test_public_api.py",
    "balancer/__init__.py": "re-exports and __module__ fix-up: tests/unit/test_public_api.py, tests/unit/balancer/",
    "backpressure/__init__.py": "re-exports and __module__ fix-up: tests/unit/test_public_api.py, tests/unit/backpressure/",
    "balancer/_protocol.py": "each built-in checked against it: tests/unit/balancer/test_round_robin.py, test_priority.py",
    "backpressure/_protocol.py": "the built-ins checked against it: tests/unit/backpressure/test_task_count.py",
    # The public surface: driven through the API, with real workers.
    "pool/_cli.py": f"the real command in a subprocess: {IT}test_job_lifecycle.py, {IT}test_store_outages.py, "
    f"{IT}test_status_view.py (tmux)",
    "pool/_pool.py": f"every pool test: {IT}test_pool_lifecycle.py, {IT}test_routines.py, {IT}test_dispatch_faults.py",
    "pool/_pool_views.py": f"stats(), workers, pids: {IT}test_admission.py, {IT}test_metrics.py, {IT}test_recycle.py",
    "pool/_pool_jobs.py": f"submit, schedule, jobs: {IT}test_jobs.py, {IT}test_job_lifecycle.py",
    "pool/_pool_executor.py": f"WorkerPool.executor(): {IT}test_executor.py",
    "pool/_executor_calls.py": f"the calls an executor sends, on real workers: {IT}test_executor.py, {IT}test_joblib.py",
    "pool/_executor_feed.py": f"the concurrent.futures behaviours with real workers: {IT}test_executor.py "
    f"(construction alone: {UT}test_executor.py)",
    "pool/joblib.py": f"the real joblib and scikit-learn on real workers: {IT}test_joblib.py",
    "pool/_parse.py": f"sizes and import paths: {UT}_worker/test_recycle.py, {UT}test_config.py",
    "pool/_places.py": f"default files and directories: {UT}test_config.py, {IT}test_worker_secret.py",
    "pool/_version.py": "a constant, exported as pool.__version__: tests/unit/test_public_api.py",
    # _base: small helpers both sides use.
    "pool/_base/_exit.py": f"the exit codes a worker uses: {UT}_worker/test_recycle.py, {IT}test_worker_main.py",
    "pool/_base/_ids.py": f"worker uids in every registry and status document: {IT}test_discovery.py, {IT}test_metrics.py",
    "pool/_base/_lost.py": f"store out of reach vs refusing: {IT}test_store_outages.py, {IT}test_store_start.py",
    "pool/_base/_process.py": f"children watched and forked: {IT}test_template.py, {IT}test_pool_lifecycle.py",
    "pool/_base/_random.py": "registered with hypothesis in tests/conftest.py; used by every balancer test",
    "pool/_base/_role.py": f"a worker process says it is one at start: {IT}test_worker_main.py, {IT}test_template.py",
    "pool/_base/_tasks.py": f"owned tasks: {UT}_jobs/_stores/test_batch.py, {UT}_discovery/test_registry.py, "
    f"{IT}test_pool_lifecycle.py",
    # _discovery
    "pool/_discovery/_protocol.py": f"every backend yields its events: {IT}test_discovery.py, {IT}test_lan.py",
    "pool/_discovery/_static.py": f"the in-memory double most integration tests use: {IT}test_discovery.py",
    "pool/_discovery/_local.py": f"a local registry with real workers: {IT}test_discovery.py; its record format: "
    f"{UT}_discovery/test_store.py",
    "pool/_discovery/_lan.py": f"zeroconf in private network namespaces: {IT}test_lan.py",
    # _dispatch: the call path is only whole with real workers.
    "pool/_dispatch/_admission.py": f"the gate and the FIFO queue on real workers: {IT}test_admission.py",
    "pool/_dispatch/_path.py": f"every call goes through it: {IT}test_routines.py, {IT}test_dispatch_faults.py, "
    f"{IT}test_faults.py",
    "pool/_dispatch/_placement.py": f"offers in the balancer's order: {IT}test_known_full.py, {IT}test_leaky_bucket.py, "
    f"{IT}test_backpressure.py",
    "pool/_dispatch/_relay.py": f"nested calls through the pool: {IT}test_routines.py, {IT}test_limits.py, {IT}test_trace.py",
    # _fleet
    "pool/_fleet/_local_fleet.py": f"spawn, replace, grow, stop: {IT}test_fleet.py, {IT}test_pool_lifecycle.py",
    "pool/_fleet/_local_worker.py": f"one spawned worker's life: {IT}test_pool_lifecycle.py, {IT}test_local_transport.py",
    "pool/_fleet/_plan.py": f"the provisioning state machine (PlanMachine): {UT}_fleet/test_provision.py",
    "pool/_fleet/_provisioning.py": f"worker requests and env: {UT}_fleet/test_provision.py, {IT}test_capacity.py",
    "pool/_fleet/_template.py": f"forking from the template: {IT}test_template.py",
    # _jobs
    "pool/_jobs/_attend.py": f"each way out of a placement, driven by the scheduler: {UT}_jobs/test_scheduler.py, "
    f"{UT}_jobs/test_wakeups.py, {IT}test_job_burst.py, {IT}test_limits.py",
    "pool/_jobs/_pause_cli.py": f"`leakypool jobs URL pause`: {IT}test_store_outages.py",
    "pool/_jobs/_codec.py": f"retry policies and payloads: {UT}_jobs/test_attempt.py, {IT}test_jobs.py",
    "pool/_jobs/_job.py": f"pool.Job as callers use it: {IT}test_jobs.py, {IT}test_job_lifecycle.py",
    "pool/_jobs/_pause.py": f"paused queues seen by a dispatching process: {IT}test_store_outages.py, "
    f"{UT}_jobs/_stores/test_pauses.py",
    "pool/_jobs/_presence.py": f"owner leases and notices between processes: {IT}test_replicas.py, {IT}test_notices.py",
    "pool/_jobs/_recorder.py": f"running and outcomes recorded: {IT}test_jobs.py, {IT}test_job_lifecycle.py",
    "pool/_jobs/_retention.py": f"keep_finished: {IT}test_job_lifecycle.py; the purge itself: {UT}_jobs/test_store.py",
    "pool/_jobs/_stores/_postgres.py": f"the store contract on a real PostgreSQL: {UT}_jobs/test_store.py",
    "pool/_jobs/_stores/_postgres_admin.py": f"upgrades, retention, operator verbs: {UT}_jobs/test_store.py, "
    f"{UT}_jobs/_stores/test_open.py, {IT}test_job_lifecycle.py",
    "pool/_jobs/_stores/_postgres_sql.py": f"the statements, through the contract suite: {UT}_jobs/test_store.py",
    "pool/_jobs/_stores/_sqlite_schema.py": f"the schema, through the contract suite: {UT}_jobs/test_store.py, "
    f"{UT}_jobs/_stores/test_open.py",
    "pool/_jobs/_stores/_sqlite_thread.py": f"every SQLite store operation runs on it: {UT}_jobs/_stores/test_sqlite.py, "
    f"{UT}_jobs/test_store.py",
    # _observe
    "pool/_observe/_http.py": f"the port over real HTTP: {IT}test_metrics.py, {IT}test_worker_metrics.py, {IT}test_page.py",
    "pool/_observe/_observer.py": f"/metrics and /status of a real pool: {IT}test_metrics.py, {IT}test_grafana.py",
    "pool/_observe/_progress.py": f"progress= of pool.map: {UT}_dispatch/test_fanout.py",
    "pool/_observe/_stats.py": f"snapshots: {UT}_observe/test_metrics.py, {IT}test_admission.py",
    # _transport
    "pool/_transport/_buffers.py": f"1 GiB values over memfd regions: {IT}test_large_values.py",
    "pool/_transport/_side.py": f"the side connection: {UT}_transport/test_wire.py, {IT}test_large_values.py",
    "pool/_transport/_malloc.py": f"a process-wide setting for large messages: {IT}test_large_values.py",
    "pool/_transport/_connection.py": f"a pool's connection to each worker: {IT}test_routines.py, {IT}test_dispatch_faults.py",
    "pool/_transport/_dispatcher.py": f"where a call goes: {UT}test_routine.py",
    "pool/_transport/_grpc_channel.py": f"workers over TCP: {IT}test_local_transport.py, {IT}test_worker_secret.py, {IT}test_lan.py",
    "pool/_transport/_outgoing.py": f"a call opened on a session: {UT}_transport/test_calls.py, {UT}_transport/test_session.py",
    "pool/_transport/_rpc.py": f"names and the worker record: {UT}_transport/test_framing.py, {UT}_discovery/test_store.py",
    "pool/_transport/_task.py": f"Task as hooks see it: {UT}_dispatch/test_limits.py, {UT}_transport/test_calls.py",
    "pool/_transport/_secret.py": f"the per-user secret of TCP workers: {IT}test_worker_secret.py, {UT}test_config.py",
    "pool/_transport/_tls.py": f"mutual TLS with real certificates: {IT}test_lan.py, {IT}test_capacity_netns.py",
    "pool/_transport/_unix_channel.py": f"the default transport: {UT}_transport/test_framing.py, {IT}test_local_transport.py",
    # _worker: the worker process, run for real.
    "pool/_worker/_admission.py": f"a worker's verdicts: {UT}_dispatch/test_room.py, {UT}_dispatch/test_roster.py, "
    f"{UT}_worker/test_signals.py",
    "pool/_worker/_grpc_server.py": f"a worker on TCP: {IT}test_worker_main.py, {IT}test_worker_secret.py, {IT}test_lan.py",
    "pool/_worker/_hosted.py": f"calls a worker hosts: {IT}test_routines.py, {IT}test_plain.py",
    "pool/_worker/_lifecycle.py": f"idle timeout, lifetime, drains: {IT}test_pool_lifecycle.py, {IT}test_recycle.py, "
    f"{IT}test_worker_main.py",
    "pool/_worker/_main.py": f"worker_main.py as an operator runs it: {IT}test_worker_main.py",
    "pool/_worker/_metrics.py": f"a worker's own metrics over real HTTP: {IT}test_worker_metrics.py",
    "pool/_worker/_peers.py": f"several dispatchers on one worker: {IT}test_replicas.py, {IT}test_discovery.py",
    "pool/_worker/_plain.py": f"plain def routines: {IT}test_plain.py",
    "pool/_worker/_registry.py": f"a worker's registry row: {UT}_discovery/test_registry.py, {IT}test_capacity.py",
    "pool/_worker/_runner.py": f"where routines run: {IT}test_responsiveness.py, {IT}test_routines.py, {UT}_observe/test_trace.py",
    "pool/_worker/_service.py": f"the service a worker runs: {IT}test_responsiveness.py, {IT}test_routines.py, "
    f"{IT}test_worker_main.py",
    "pool/_worker/_template.py": f"the forking template: {IT}test_template.py",
    "pool/_worker/_threads.py": f"a gRPC worker's two loops: {IT}test_responsiveness.py, {IT}test_worker_main.py",
    "pool/_worker/_trace.py": f"worker-side spans with the real SDK: {IT}test_trace.py",
    "pool/_worker/_unix_server.py": f"a pool's own workers on a unix socket: {IT}test_local_transport.py, {IT}test_worker_main.py",
    "pool/_worker/_upstream.py": f"nested calls from a worker: {IT}test_routines.py, {IT}test_trace.py",
}
"""Modules with no unit test module at the mirrored path (tests/unit/<package path>/test_<name>.py), and where
they are tested instead. Only what needs real processes, sockets or stores, or is a thin wiring of parts
tested on their own, belongs here; a new module gets a unit test module, or a line here saying why not."""


# -- the checker ------------------------------------------------------------------------


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    """``pool/_dispatch/_limits.py`` -> ``pool._dispatch._limits``; a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: pathlib.Path, root: pathlib.Path = ROOT) -> set[str]:
    """Absolute dotted names ``path`` imports (relative imports resolved, ``from x import y`` as x.y too)."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def dependencies(path: pathlib.Path, root: pathlib.Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports: ``from pkg import name`` is pkg.name when that
    is a module, else pkg (the module that defines the name); ``import a.b.c`` is its longest known prefix."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in known else _known(module, known))
    return {m for m in found if m is not None and m != name}


def _known(dotted: str, known: set[str]) -> str | None:
    while dotted and dotted not in known:
        dotted = dotted.rpartition(".")[0]
    return dotted or None


def module_graph(root: pathlib.Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports (generated protobuf stubs left out)."""
    paths = [p for package in packages for p in (root / package).rglob("*.py") if not p.name.endswith("_pb2.py")]
    known = {module_name(p, root) for p in paths}
    return {module_name(p, root): dependencies(p, root, known) for p in paths}


def layer_of(module: str) -> str:
    """The unit `ALLOWED` speaks of: a sub-package of pool, a surface or leaf module, or a leaf package."""
    parts = module.split(".")
    if parts[0] != "pool":
        return parts[0]
    if len(parts) > 1 and f"pool.{parts[1]}" in ALLOWED:
        return f"pool.{parts[1]}"
    return module if len(parts) <= 2 else ".".join(parts[:2])


def forbidden_edges(graph: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """Imports that cross layers against `ALLOWED`: (importer, imported), sorted."""
    bad = []
    for module, deps in graph.items():
        here = layer_of(module)
        for dep in deps:
            there = layer_of(dep)
            if there == here:
                continue
            if here in ("balancer", "backpressure"):
                allowed = False  # the leaf packages import nothing of ours
            elif here in LEAVES:
                allowed = there in LEAVES or dep in LEAVES
            elif here in SURFACE:
                allowed = True
            else:
                allowed = there in LEAVES or there in ALLOWED.get(here, frozenset())
            if not allowed:
                bad.append((module, dep))
    return sorted(bad)


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, directly or around a loop (Tarjan's SCCs of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


GRAPH = module_graph(ROOT, PACKAGES)


# -- the layout -----------------------------------------------------------------------------


def test_no_module_should_cross_layers_upward():
    """Test that every import runs down the layers (surface -> dispatch -> transport -> base)."""
    assert forbidden_edges(GRAPH) == []


def test_no_modules_should_import_each_other():
    """Test that the import graph has no circle, of two modules or around a loop."""
    assert cycles(GRAPH) == []


def test_the_layers_should_have_no_circle_between_them():
    """Test that, folded to layers, the graph still has no circle (no two layers lean on each other)."""
    folded: dict[str, set[str]] = {}
    for module, deps in GRAPH.items():
        folded.setdefault(layer_of(module), set()).update(layer_of(d) for d in deps if layer_of(d) != layer_of(module))
    assert cycles(folded) == []


@pytest.mark.parametrize("path", sorted(WORKER.rglob("*.py")), ids=lambda p: p.name)
def test_worker_package_should_import_only_what_both_sides_share(path):
    """Test that the worker side imports no dispatching-side module, even inside shared layers."""
    name = module_name(path)
    assert not (GRAPH[name] & WORKER_MAY_NOT_IMPORT), name


def test_nothing_outside_the_worker_package_should_import_it():
    """Test that the process boundary is a folder boundary: only pool._worker imports pool._worker."""
    importers = {
        m
        for m, deps in GRAPH.items()
        for d in deps
        if d.startswith("pool._worker") and not m.startswith("pool._worker")
    }
    assert importers == set()


def test_the_leaf_packages_should_import_nothing_of_pool():
    """Test that balancer/ and backpressure/ stay embeddable in other pools (wool)."""
    for module, deps in GRAPH.items():
        if module.split(".")[0] in ("balancer", "backpressure"):
            assert not any(d.split(".")[0] == "pool" for d in deps), module


@pytest.mark.parametrize(
    "path",
    [p for package in PACKAGES for p in (ROOT / package).rglob("*.py") if not p.name.endswith("_pb2.py")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_a_module_should_stay_one_job(path):
    """Test that no module grows past MAX_MODULE_LINES (split it by what it owns)."""
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


def test_the_layout_should_have_the_promised_sub_packages():
    """Test DESIGN.md's layout: the dispatching side's layers and the worker side are sub-packages of pool."""
    for name in ("_dispatch", "_fleet", "_transport", "_observe", "_worker", "_discovery", "_jobs", "_base"):
        assert (POOL / name / "__init__.py").is_file(), name


def test_the_top_of_pool_should_hold_only_the_public_surface_and_leaves():
    """Test that a reader of pool/ meets the public surface first: every other module lives in a layer."""
    top = {module_name(p) for p in POOL.glob("*.py")}
    assert top <= SURFACE | LEAVES


def test_zeroconf_should_be_imported_by_the_lan_module_only():
    """Test that one module owns the zeroconf dependency (it loads only when LAN discovery is used)."""
    importers = [p for p in POOL.rglob("*.py") if any(m.split(".")[0] == "zeroconf" for m in imported_modules(p))]
    assert importers == [POOL / "_discovery" / "_lan.py"]


def test_grpc_should_be_imported_by_the_grpc_transport_modules_only():
    """Test that grpc stays behind the TCP transport: a pool of spawned workers and the workers never load it."""
    importers = {
        p.relative_to(POOL).as_posix()
        for p in POOL.rglob("*.py")
        if "grpc" in {m.split(".")[0] for m in imported_modules(p)}
    }
    assert importers == {"_transport/_grpc_channel.py", "_worker/_grpc_server.py", "_transport/_tls.py"}


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
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT, timeout=120, check=False).returncode == 0


def test_the_dispatching_side_should_name_worker_modules_only_to_start_a_worker_process():
    """Test that pool._worker appears outside its package only as a process's entry point, never imported.

    A fresh-interpreter template is ``python -m pool._worker._template``; a
    template forked from the pool's process enters the same module by name
    once it is no longer the pool (_fleet/_template.py); a template preloads
    the gRPC server for TCP workers (_fleet/_local_fleet.py).
    """
    outside = [p for p in POOL.rglob("*.py") if WORKER not in p.parents]
    naming = {p.relative_to(POOL).as_posix() for p in outside if '"pool._worker' in p.read_text()}
    assert naming <= {"_fleet/_template.py", "_fleet/_local_fleet.py"}


# -- tests mirror the tree ----------------------------------------------------------------


def package_modules(root: pathlib.Path = ROOT) -> list[str]:
    """Paths (``pool/_dispatch/_limits.py``) of the modules that need tests: all but generated stubs and
    package ``__init__`` files that only re-export (a docstring, imports and ``__all__``)."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if path.name.endswith("_pb2.py") or (path.name == "__init__.py" and _only_reexports(path)):
                continue
            found.append(path.relative_to(root).as_posix())
    return found


def _only_reexports(path: pathlib.Path) -> bool:
    def plain(node: ast.stmt) -> bool:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return True
        if isinstance(node, ast.Expr):
            return isinstance(node.value, ast.Constant)  # the docstring
        return isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]

    return all(plain(node) for node in ast.parse(path.read_text()).body)


def mirrored_test(module: str) -> str:
    """``pool/_dispatch/_limits.py`` -> ``tests/unit/pool/_dispatch/test_limits.py``."""
    path = pathlib.PurePosixPath(module)
    return (pathlib.PurePosixPath("tests/unit") / path.parent / f"test_{path.name.lstrip('_')}").as_posix()


def untested(modules: Iterable[str], root: pathlib.Path, covered: Mapping[str, str]) -> list[str]:
    """Modules with neither a test module at the mirrored path nor a line in ``covered``."""
    return [m for m in modules if m not in covered and not (root / mirrored_test(m)).is_file()]


def test_every_module_should_have_a_mirrored_unit_test_or_say_where_it_is_tested():
    """Test that tests/unit mirrors the tree: a module's tests are where a newcomer looks, or COVERED_ELSEWHERE
    says where they are. A new module with neither fails here: add tests/unit/<its path>/test_<name>.py."""
    assert untested(package_modules(), ROOT, COVERED_ELSEWHERE) == []


def test_covered_elsewhere_should_name_only_modules_without_a_mirrored_test():
    """Test that the table holds no stale line: each names a module that exists and has no mirrored test
    (once one is written, its line goes)."""
    modules = set(package_modules())
    stale = {m for m in COVERED_ELSEWHERE if m not in modules or (ROOT / mirrored_test(m)).is_file()}
    assert stale == set()


@pytest.mark.parametrize("module", sorted(COVERED_ELSEWHERE))
def test_covered_elsewhere_should_name_test_files_that_exist(module):
    """Test that every reason names at least one test file or folder, and that each one named exists."""
    named = re.findall(r"tests/[\w/.]*\w", COVERED_ELSEWHERE[module])
    assert named, module
    assert [n for n in named if not (ROOT / n).exists()] == []


def test_unit_test_packages_should_have_an_init_so_module_names_stay_unique():
    """Test that every folder under tests/unit holding tests is a package: two test_store.py (_discovery,
    _jobs) must import as different modules."""
    folders = {p.parent for p in UNIT_TESTS.rglob("test_*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


# -- the checker itself (or the tests above could not fail) --------------------------------


def _tree(tmp_path: pathlib.Path, files: Mapping[str, str]) -> pathlib.Path:
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


class TestChecker:
    def test_cycles_should_find_two_modules_that_import_each_other_when_one_import_is_for_types_only(self, tmp_path):
        """Test that a circle closed by a TYPE_CHECKING import is still a circle."""
        root = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "",
                "pkg/a.py": "from .b import B\n",
                "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nB = 1\n",
            },
        )
        assert cycles(module_graph(root, ["pkg"])) == [["pkg.a", "pkg.b"]]

    def test_cycles_should_find_a_loop_through_three_modules(self):
        """Test that a longer loop is found too, and a straight chain is not one."""
        assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
        assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []

    def test_module_graph_should_resolve_relative_and_package_imports(self, tmp_path):
        """Test that ``from .. import x``, ``from ..sub import y`` and attribute imports land on modules."""
        root = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "from .low import thing\n",
                "pkg/low.py": "thing = 1\n",
                "pkg/sub/__init__.py": "",
                "pkg/sub/mod.py": "from .. import low\nfrom ..low import thing\nfrom .. import thing as t\n",
            },
        )
        graph = module_graph(root, ["pkg"])
        assert graph["pkg.sub.mod"] == {"pkg.low", "pkg"}
        assert graph["pkg"] == {"pkg.low"}

    def test_forbidden_edges_should_report_an_upward_import(self):
        """Test that transport importing dispatch (upward) is reported, and the reverse is not."""
        graph = {
            "pool._transport._session": {"pool._dispatch._limits"},
            "pool._dispatch._limits": {"pool._transport._session", "pool._errors"},
            "pool._pool": {"pool._dispatch._limits", "pool._jobs._job"},
        }
        assert forbidden_edges(graph) == [("pool._transport._session", "pool._dispatch._limits")]

    def test_forbidden_edges_should_report_a_sideways_import_between_siblings(self):
        """Test that jobs importing dispatch (siblings beside each other) is reported."""
        assert forbidden_edges({"pool._jobs._job": {"pool._dispatch._limits"}}) == [
            ("pool._jobs._job", "pool._dispatch._limits")
        ]

    def test_forbidden_edges_should_report_a_leaf_package_importing_pool(self):
        """Test that balancer importing pool is reported."""
        assert forbidden_edges({"balancer._priority": {"pool._errors"}}) == [("balancer._priority", "pool._errors")]

    def test_untested_should_report_a_new_module_with_neither_a_mirrored_test_nor_a_line(self, tmp_path):
        """Test that the mirror check fails for a module with no test, and passes once either is added."""
        root = _tree(
            tmp_path,
            {
                "pool/_dispatch/_old.py": "",
                "pool/_dispatch/_new.py": "",
                "pool/_dispatch/_wired.py": "",
                "tests/unit/pool/_dispatch/test_old.py": "",
            },
        )
        modules = ["pool/_dispatch/_old.py", "pool/_dispatch/_new.py", "pool/_dispatch/_wired.py"]
        covered = {"pool/_dispatch/_wired.py": "tests/integration/test_x.py"}
        assert untested(modules, root, covered) == ["pool/_dispatch/_new.py"]
        _tree(tmp_path, {"tests/unit/pool/_dispatch/test_new.py": ""})
        assert untested(modules, root, covered) == []

    def test_package_modules_should_skip_only_init_files_that_only_reexport(self, tmp_path):
        """Test that an __init__ with code of its own needs tests like any module."""
        _tree(
            tmp_path,
            {
                "pool/__init__.py": '"""Doc."""\nfrom ._a import A as A\n__all__ = ["A"]\n',
                "pool/_a.py": "A = 1\n",
                "pool/_sub/__init__.py": "def helper():\n    pass\n",
                "pool/_sub/x_pb2.py": "",
                "balancer/__init__.py": "",
                "backpressure/__init__.py": "",
            },
        )
        assert package_modules(tmp_path) == ["pool/_a.py", "pool/_sub/__init__.py"]
