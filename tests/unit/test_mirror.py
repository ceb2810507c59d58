"""Tests that tests/unit mirrors the package tree: a module's tests are where a newcomer looks.

Every module under pool/, balancer/ and backpressure/ has a unit test module
at the mirrored path (``pool/_dispatch/_limits.py`` ->
``tests/unit/pool/_dispatch/test_limits.py``), or a line in
`COVERED_ELSEWHERE` naming where it is tested and why not there.
"""

from __future__ import annotations

import ast
import pathlib
import re
from collections.abc import Iterable, Mapping

import pytest

from tests.unit.test_layout import PACKAGES, ROOT, _tree

UNIT_TESTS = ROOT / "tests" / "unit"

IT = "tests/integration/"
UT = "tests/unit/pool/"
"""Prefixes for the table below (the covering files are named in full, so a reader can open them)."""
COVERED_ELSEWHERE: Mapping[str, str] = {
    # The root and the leaf packages' fronts: what they export is the public API.
    "pool/__init__.py": "the public names, lazy attributes, __module__ fix-up: tests/unit/test_public_api.py",
    "balancer/__init__.py": "re-exports and __module__ fix-up: tests/unit/test_public_api.py, tests/unit/balancer/",
    "backpressure/__init__.py": "re-exports and __module__ fix-up: tests/unit/test_public_api.py, tests/unit/backpressure/",
    "balancer/_protocol.py": "each built-in checked against it: tests/unit/balancer/test_round_robin.py, test_priority.py",
    "backpressure/_protocol.py": "the built-ins checked against it: tests/unit/backpressure/test_task_count.py",
    # The public surface: driven through the API, with real workers.
    "pool/_cli/_main.py": f"the real command in a subprocess: {IT}jobs/test_job_lifecycle.py, {IT}jobs/test_store_outages.py, "
    f"{IT}observe/test_status_view.py (tmux)",
    "pool/_pool/_worker_pool.py": f"every pool test: {IT}fleet/test_pool_lifecycle.py, {IT}calls/test_routines.py, {IT}calls/test_dispatch_faults.py",
    "pool/_pool/_layers.py": f"the layers wired, started and stopped: {IT}fleet/test_pool_lifecycle.py, {IT}fleet/test_fleet.py",
    "pool/_pool/_views.py": f"stats(), workers, pids: {IT}dispatch/test_admission.py, {IT}observe/test_metrics.py, {IT}fleet/test_recycle.py",
    "pool/_pool/_jobs.py": f"submit, schedule, jobs: {IT}jobs/test_jobs.py, {IT}jobs/test_job_lifecycle.py",
    "pool/_pool/_executors.py": f"WorkerPool.executor(): {IT}executor/test_executor.py",
    "pool/joblib.py": f"the real joblib and scikit-learn on real workers: {IT}executor/test_joblib.py",
    "pool/_version.py": "a constant, exported as pool.__version__: tests/unit/test_public_api.py",
    # _base: small helpers both sides use.
    "pool/_base/_exit.py": f"the exit codes a worker uses: {UT}_worker/test_recycle.py, {IT}fleet/test_worker_main.py",
    "pool/_base/_random.py": "registered with hypothesis in tests/conftest.py; used by every balancer test",
    # _discovery
    "pool/_discovery/_protocol.py": f"every backend yields its events: {IT}discovery/test_discovery.py, {IT}discovery/test_lan.py",
    "pool/_discovery/_lan.py": f"zeroconf in private network namespaces: {IT}discovery/test_lan.py",
    # _worker: the worker process, run for real.
    "pool/_worker/_main.py": f"worker_main.py as an operator runs it: {IT}fleet/test_worker_main.py",
    "pool/_worker/_template.py": f"the forking template: {IT}fleet/test_template.py",
    "pool/_worker/_grpc_server.py": f"a worker on TCP, behind its door: {IT}trust/test_door.py, {IT}trust/test_worker_secret.py",
}
"""Modules with no unit test module at the mirrored path (tests/unit/<package path>/test_<name>.py), and where
they are tested instead. Only what needs real processes, sockets or stores, or is a thin wiring of parts
tested on their own, belongs here; a new module gets a unit test module, or a line here saying why not."""


def package_modules(root: pathlib.Path = ROOT) -> list[str]:
    """Paths (``pool/_dispatch/_limits.py``) of the modules that need tests: all but generated stubs and
    package ``__init__`` files that only re-export (a docstring, imports, ``__all__``, and a ``LAZY`` table with
    the ``__getattr__`` that reads it: `pool._base._lazy`, tested there and in tests/unit/test_layout.py)."""
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
        if isinstance(node, ast.If):  # if TYPE_CHECKING: imports
            return getattr(node.test, "id", None) == "TYPE_CHECKING" and all(plain(inner) for inner in node.body)
        if isinstance(node, ast.FunctionDef):  # def __getattr__(name): return lazy_attribute(...)
            call = node.body[-1].value if isinstance(node.body[-1], ast.Return) else None
            return node.name == "__getattr__" and getattr(getattr(call, "func", None), "id", None) == "lazy_attribute"
        return isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] in (
            ["__all__"],
            ["LAZY"],
        )

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
    """Test that every folder under tests/ holding modules is a package: two test_store.py (_discovery,
    _jobs) must import as different modules, and workers import routines by their full name."""
    folders = {p.parent for p in (ROOT / "tests").rglob("*.py")} - {ROOT / "tests", ROOT / "tests" / "typing"}
    # (tests/typing: files mypy reads, never imported)
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file()) == []


# -- the checker itself (or the tests above could not fail) --------------------------------


class TestChecker:
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
