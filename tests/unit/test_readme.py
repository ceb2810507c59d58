"""The README and docs/ cannot drift: every setting and error documented, every code block valid, no dead link.

Complete programs in them (a block that calls ``asyncio.run``) are run by
tests/integration/examples/test_examples.py; here every Python block must compile
(top-level ``await`` allowed: most blocks are fragments of a ``main``).
"""

from __future__ import annotations

import ast
import pathlib
import re
import unicodedata

import pytest

import pool
from pool._config._settings import POOL_SETTINGS, WORKER_SETTINGS

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
TOPICS = {
    "concepts",
    "admission",
    "limits",
    "jobs",
    "stores",
    "lan-security",
    "observability",
    "configuration",
    "errors",
    "architecture",
    "performance",
}

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def code_blocks(text: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == language]


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    text = FENCE.sub("", text)
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        slug = "".join(c for c in heading.strip().lower() if c in " -_" or unicodedata.category(c)[0] in "LN")
        out.add(slug.replace(" ", "-"))
    return out


def links(page: pathlib.Path) -> list[str]:
    return LINK.findall(FENCE.sub("", page.read_text()))


def test_docs_should_hold_one_file_per_topic():
    assert {p.stem for p in DOCS} >= TOPICS


def test_readme_should_be_a_landing_page():
    """Test that the README stays short and links every topic of the reference."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    linked = {pathlib.Path(target.split("#")[0]).stem for target in links(README) if target.startswith("docs/")}
    assert linked >= TOPICS


def test_configuration_should_have_a_table_row_for_every_variable():
    """Test that each LEAKYPOOL_* variable has a row in a configuration table."""
    rows = set(
        re.findall(
            r"^\| `(LEAKYPOOL_[A-Z_]+)` \|", (ROOT / "docs" / "configuration.md").read_text(), flags=re.MULTILINE
        )
    )
    assert {s.env for s in POOL_SETTINGS + WORKER_SETTINGS} <= rows


def test_errors_should_draw_every_error_in_the_tree():
    """Test that every public error appears in the error tree."""
    (tree,) = code_blocks((ROOT / "docs" / "errors.md").read_text(), "")[:1]
    for name in pool.__all__:
        obj = getattr(pool, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj is not pool.RemoteTraceback:
            assert re.search(rf"(── |^){name}\b", tree, flags=re.MULTILINE), name


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_should_compile(page):
    for index, block in enumerate(code_blocks(page.read_text(), "python")):
        try:
            compile(block, f"{page.name} block {index}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as exc:
            pytest.fail(f"{page.name}, python block {index}: {exc}\n{block}")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_should_reach_a_file_and_its_anchor(page):
    for target in links(page):
        if re.match(r"^[a-z]+:", target):
            continue  # an absolute URL: not checked offline
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: dead link {target}"
        if anchor:
            assert file.suffix == ".md", f"{page.name}: an anchor into a non-Markdown file: {target}"
            assert anchor in anchors(file.read_text()), f"{page.name}: no heading for #{anchor} in {file.name}"


class TestChecker:
    """The link and anchor checks themselves."""

    def test_anchors_should_follow_githubs_rule(self):
        text = "# Concepts\n## The leaky bucket: backpressure + priority\n```\n# not a heading\n```\n"
        assert anchors(text) == {"concepts", "the-leaky-bucket-backpressure--priority"}

    def test_links_should_skip_code_and_include_images(self, tmp_path):
        page = tmp_path / "p.md"
        page.write_text("[a](a.md#x) ![img](i.png)\n```\n[no](code.md)\n```\n")
        assert links(page) == ["a.md#x", "i.png"]
