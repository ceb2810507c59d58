"""The README documents every setting and every error (docs that cannot drift)."""

from __future__ import annotations

import pathlib
import re

import pool
from pool._config import POOL_SETTINGS, WORKER_SETTINGS

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_should_have_a_table_row_for_every_variable():
    """Test that each LEAKYPOOL_* variable has a row in a configuration table."""
    rows = set(re.findall(r"^\| `(LEAKYPOOL_[A-Z_]+)` \|", README, flags=re.M))
    assert {s.env for s in POOL_SETTINGS + WORKER_SETTINGS} <= rows


def test_readme_should_draw_every_error_in_the_tree():
    """Test that every public error appears in the README's error tree."""
    tree = README[README.index("## Errors"):]
    for name in pool.__all__:
        obj = getattr(pool, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj is not pool.RemoteTraceback:
            assert re.search(rf"(── |^){name}\b", tree, flags=re.M), name
