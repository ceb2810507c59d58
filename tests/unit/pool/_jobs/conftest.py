"""The job store contract's backends, for test_store.py and test_store_rates.py."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request, tmp_path) -> tuple[str, str]:
    """(kind, where): a SQLite file, or a fresh database on the session's PostgreSQL server."""
    if request.param == "postgres":
        return "postgres", request.getfixturevalue("postgres_url")
    return "sqlite", str(tmp_path / "jobs.db")
