"""Tests that docs/architecture.md's module tree names every module there is, and none there is not.

The tree is prose a newcomer reads first; it went stale once (the Executor family and WorkerPool's
facets were missing from it for a round). Each line ``pool/<package>/`` opens a package's section;
every ``_name.py`` (or ``name.py``) mentioned in that section is a module of that package.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
_SECTION = re.compile(r"^(pool(?:/\w+)*/)\s")
_MODULE = re.compile(r"(?<![\w/.])(\w+\.py)\b")


def documented() -> dict[str, set[str]]:
    """Package folder -> the module files its section of the tree names."""
    block = DOC.read_text().split("```\npool/", 1)[1].split("```", 1)[0]
    sections: dict[str, set[str]] = {}
    current = None
    for line in ("pool/" + block).splitlines():
        if match := _SECTION.match(line):
            current = match.group(1)
            sections.setdefault(current, set())
        elif not line.startswith(" "):
            current = None  # balancer/, tests/...: not pool's
        if current is not None:
            sections[current].update(m for m in _MODULE.findall(line) if "/" not in m)
    return sections


def actual() -> dict[str, set[str]]:
    """Package folder -> its module files (but __init__ and generated stubs)."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "pool").rglob("*.py"):
        if path.name.endswith("_pb2.py") or "_proto" in path.parts:
            continue
        folder = path.parent.relative_to(ROOT).as_posix() + "/"
        found.setdefault(folder, set())
        if path.name != "__init__.py":
            found[folder].add(path.name)
    return found


def test_the_tree_should_name_every_module_of_each_package():
    """Test that no module is missing from its package's section of the tree."""
    docs = documented()
    missing = {folder: sorted(mods - docs.get(folder, set())) for folder, mods in actual().items()}
    assert {folder: mods for folder, mods in missing.items() if mods} == {}


def test_the_tree_should_name_no_module_that_is_not_there():
    """Test that the tree names no module (moved, renamed, removed) its package does not have."""
    real = actual()
    extra = {folder: sorted(mods - real.get(folder, set()) - {"__init__.py"}) for folder, mods in documented().items()}
    assert {folder: mods for folder, mods in extra.items() if mods} == {}


def test_each_package_docstring_should_name_its_modules():
    """Test that each sub-package's ``__init__`` docstring (its table of contents) names every module in it."""
    import ast

    missing = {}
    for folder, modules in actual().items():
        init = ROOT / folder / "__init__.py"
        if folder == "pool/" or not init.is_file():
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        names = set(re.findall(r"(?<![\w.])(_\w+)", doc))
        if absent := sorted(m for m in modules if m.removesuffix(".py") not in names):
            missing[folder] = absent
    assert missing == {}
