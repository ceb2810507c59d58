"""Tests for the layout docs/architecture.md describes: layers in the tree, imports flowing one way, no circle.

The dispatching process has three layers under its public surface (deciding,
talking to workers, being observed), each a sub-package of ``pool``; the
worker process is a folder of its own. These tests read every module's
imports (``TYPE_CHECKING`` ones too: a type-only import is still a
dependency a reader must follow) and check them against `ALLOWED`.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from collections.abc import Iterable, Mapping

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
POOL = ROOT / "pool"
WORKER = POOL / "_worker"
PACKAGES = ("pool", "balancer", "backpressure")

MAX_MODULE_LINES = 1000
"""A stop for accidents only, far above what a module of one idea needs (docs/architecture.md, "Size").

Size follows the idea: past ~500 lines, look for a second idea and give it an object of its own; never cut
a class in two, push explanations into end-of-line comments or pay a benchmark to stay under a count. This
bound used to be 400 and decided an API and slowed a hot path (issue 52): it only catches a file that grew
by mistake (a paste, a generated table)."""

LEAVES = frozenset(
    {
        "pool._errors",
        "pool._config",
        "pool._version",
        "pool._base._redact",
        "balancer",
        "backpressure",
    }
)
"""Imported from anywhere: the error tree, settings (a package: the settings, their parsing, places on disk), the
version, password redaction (settings echo what they refuse), and the two embeddable leaf packages."""

SURFACE = frozenset(
    {
        "pool",
        "pool._routine",
        "pool.joblib",
        "pool._pool",
        "pool._executor",
        "pool._cli",
    }
)
"""The public surface: the front modules and the families behind it (WorkerPool and pool.Executor, the
concurrent.futures machinery they share, the command line), each a folder. It wires the layers together, so it
may import any of them; its families lean on each other one way only (no circle between layers)."""

MAX_TOP_MODULES = 6
"""Modules at the top of pool/ (DESIGN "Layout"): the public front only; every family is a folder."""

ALLOWED: Mapping[str, frozenset[str]] = {
    "pool._base": frozenset(),
    "pool._transport": frozenset({"pool._base"}),
    "pool._call": frozenset({"pool._transport", "pool._base"}),
    "pool._discovery": frozenset({"pool._call", "pool._transport", "pool._base"}),
    "pool._observe": frozenset({"pool._call", "pool._transport", "pool._base"}),
    "pool._fleet": frozenset({"pool._transport", "pool._base"}),
    "pool._jobs": frozenset({"pool._call", "pool._transport", "pool._base"}),
    "pool._dispatch": frozenset({"pool._call", "pool._transport", "pool._discovery", "pool._observe", "pool._base"}),
    "pool._worker": frozenset({"pool._call", "pool._transport", "pool._discovery", "pool._observe", "pool._base"}),
}
"""Layer -> the layers it may import (besides itself and `LEAVES`). Nothing imports upward:
surface -> dispatch -> call -> transport -> base; jobs, fleet and observe beside dispatch, below the surface."""

WORKER_MAY_NOT_IMPORT = frozenset(
    {
        "pool._call._connection",
        "pool._transport._unix_channel",
        "pool._transport._grpc_channel",
        "pool._transport._tls",
        "pool._observe._observer",
        "pool._observe._metrics",
        "pool._observe._progress",
        "pool._observe._stats",
    }
)
"""Dispatching-side modules inside layers both processes share: the worker imports only what both sides use."""


# -- the checker ------------------------------------------------------------------------


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    """``pool/_dispatch/_limits.py`` -> ``pool._dispatch._limits``; a package's __init__ is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def from_module(node: ast.ImportFrom, package: list[str]) -> str:
    """The absolute dotted name ``from X import ...`` names, inside ``package`` (relative imports resolved)."""
    base = package[: len(package) - node.level + 1] if node.level else []
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: pathlib.Path, root: pathlib.Path = ROOT) -> set[str]:
    """Absolute dotted names ``path`` imports (relative imports resolved, ``from x import y`` as x.y too)."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, package)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def dependencies(path: pathlib.Path, root: pathlib.Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports: ``from pkg import name`` is pkg.name when that
    is a module, else the module pkg's ``__init__`` takes the name from (a package's exports, `exported`),
    else pkg; ``import a.b.c`` is its longest known prefix."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, package)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if sub in known:
                    found.add(sub)
                elif module != name and (origin := exported(module, root).get(alias.name)) in known:
                    found.add(origin)
                else:
                    found.add(_known(module, known))
    return {m for m in found if m is not None and m != name}


def exported(package: str, root: pathlib.Path = ROOT) -> dict[str, str]:
    """What a package's ``__init__`` re-exports: name -> the module it imports it from (type-checking and lazy
    exports included), or {} for a module or an unknown package."""
    init = root / package.replace(".", "/") / "__init__.py"
    if not init.is_file():
        return {}
    parts = package.split(".")
    names = {}
    for node in ast.walk(ast.parse(init.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            module = from_module(node, parts)
            for alias in node.names:
                origin = (
                    f"{module}.{alias.name}"
                    if (root / module.replace(".", "/") / f"{alias.name}.py").is_file()
                    else module
                )
                names[alias.asname or alias.name] = origin
    return names


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


def private_imports(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """What ``path`` takes from inside another package: ``pool._x._y`` (a private module of pool._x) or a
    ``_name`` from pool._x, imported by a module outside pool._x. A package's ``__init__`` is its wall."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    reached = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[tuple[str, str | None]] = []
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, package)
            targets = [(module, alias.name) for alias in node.names]
        for module, imported in targets:
            parts = module.split(".")
            if len(parts) < 2 or parts[0] != "pool" or not parts[1].startswith("_"):
                continue
            home = ".".join(parts[:2])
            if name == home or name.startswith(f"{home}."):
                continue
            if any(p.startswith("_") for p in parts[2:]) or _private_name(imported):
                reached.append(f"{module}:{imported}" if imported else module)
    return reached


def _private_name(name: str | None) -> bool:
    return name is not None and name.startswith("_") and not name.startswith("__")


def lazy_tables(root: pathlib.Path = ROOT) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Package -> (its ``LAZY`` table, what its ``__init__`` imports under ``TYPE_CHECKING``: name -> module)."""
    found = {}
    for init in sorted((root / "pool").rglob("__init__.py")):
        tree = ast.parse(init.read_text())
        table: dict[str, str] = {}
        typed: dict[str, str] = {}
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            if (
                isinstance(node, ast.Assign | ast.AnnAssign)
                and isinstance(target, ast.Name)
                and target.id in ("LAZY", "_LAZY")
            ):
                table = ast.literal_eval(node.value)  # type: ignore[arg-type]
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                for inner in node.body:
                    if isinstance(inner, ast.ImportFrom):
                        where = "." * inner.level + (inner.module or "")
                        typed.update({alias.asname or alias.name: where for alias in inner.names})
        if table:
            found[module_name(init, root)] = (table, typed)
    return found


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
        here = layer_of(module)
        folded.setdefault(here, set()).update(layer_of(d) for d in deps if layer_of(d) != here)
    assert cycles(folded) == []


@pytest.mark.parametrize(
    "path", [p for p in POOL.rglob("*.py") if not p.name.endswith("_pb2.py")], ids=lambda p: str(p.relative_to(POOL))
)
def test_no_module_should_reach_into_another_packages_private_modules(path):
    """Test the package walls: a sibling is imported through its ``__init__`` (what it exports), never its modules."""
    assert private_imports(path) == []


def test_a_packages_lazy_names_should_be_the_ones_it_imports_for_type_checkers():
    """Test that each ``LAZY`` table (names loaded on first use) names the module its TYPE_CHECKING import does,
    so type checkers and this file's import graph see what the name really is."""
    tables = lazy_tables()
    assert {"pool", "pool._transport", "pool._call", "pool._observe", "pool._discovery"} <= set(tables)
    for package, (table, typed) in tables.items():
        assert table == {name: typed[name] for name in table}, package


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
def test_a_module_should_not_grow_by_accident(path):
    """Test that no module grows past MAX_MODULE_LINES (a stop for accidents, not a size to aim at)."""
    assert len(path.read_text().splitlines()) <= MAX_MODULE_LINES


def test_the_layout_should_have_the_promised_sub_packages():
    """Test the layout (docs/architecture.md): the dispatching side's layers and the worker side are sub-packages of pool."""
    for name in (
        *("_dispatch", "_fleet", "_transport", "_observe", "_worker", "_discovery", "_jobs", "_base"),
        *("_call", "_config", "_cli", "_executor", "_pool"),
    ):
        assert (POOL / name / "__init__.py").is_file(), name


def test_the_top_of_pool_should_hold_only_the_public_surface_and_leaves():
    """Test that a reader of pool/ meets the public surface first: every other module lives in a layer."""
    top = {module_name(p) for p in POOL.glob("*.py")}
    assert top <= SURFACE | LEAVES
    assert len(top) <= MAX_TOP_MODULES, sorted(top)


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


def test_a_worker_should_load_no_dispatching_side_module():
    """Test, at run time, what the import graph says: a worker imports the shared packages (whose ``__init__``
    exports their dispatching-side names lazily) and loads none of `WORKER_MAY_NOT_IMPORT`."""
    check = "import sys, pool._worker._main; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", check], cwd=ROOT, timeout=120, check=True, capture_output=True, text=True
    )
    assert set(out.stdout.split()) & WORKER_MAY_NOT_IMPORT == set()


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
        assert graph["pkg.sub.mod"] == {"pkg.low"}  # `thing` through pkg's exports is pkg.low's
        assert graph["pkg"] == {"pkg.low"}

    def test_module_graph_should_see_through_a_packages_type_checking_exports(self, tmp_path):
        """Test that a name a package exports lazily (imported only for type checkers) is its module's."""
        root = _tree(
            tmp_path,
            {
                "pkg/__init__.py": "if TYPE_CHECKING:\n    from .heavy import Big as Big\nhere = 1\n",
                "pkg/heavy.py": "Big = 1\n",
                "pkg/sub/__init__.py": "",
                "pkg/sub/mod.py": "from .. import Big, here\n",
            },
        )
        assert module_graph(root, ["pkg"])["pkg.sub.mod"] == {"pkg.heavy", "pkg"}

    def test_private_imports_should_report_a_reach_into_a_sibling_and_allow_its_exports(self, tmp_path):
        """Test that ``from .._b._m import x`` and ``from .._b import _x`` are reported, and ``from .._b import x``
        or an import inside one's own package is not."""
        root = _tree(
            tmp_path,
            {
                "pool/_a/m.py": "from .._b._m import x\nfrom .._b import _y, z\nfrom ._n import w\nfrom pool._b._m import v\n",
            },
        )
        assert private_imports(root / "pool/_a/m.py", root) == ["pool._b._m:x", "pool._b:_y", "pool._b._m:v"]

    def test_forbidden_edges_should_report_an_upward_import(self):
        """Test that transport importing dispatch (upward) is reported, and the reverse is not."""
        graph = {
            "pool._transport._session": {"pool._dispatch._limits"},
            "pool._dispatch._limits": {"pool._transport._session", "pool._errors"},
            "pool._pool._worker_pool": {"pool._dispatch._limits", "pool._jobs._job"},
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
