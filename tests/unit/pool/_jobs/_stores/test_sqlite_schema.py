"""Tests for pool._jobs._stores._sqlite_schema: a new file, an older file migrated, a file refused, rates given back.

Real SQLite files; each test opens its connections with `database` (closed on the way out).
"""

from __future__ import annotations

import contextlib
import pathlib
import sqlite3
from collections.abc import Iterator

import pytest

from pool._errors import ConfigError
from pool._jobs._stores import _sqlite_schema as schema
from pool._jobs._stores._sqlite_schema import COLUMNS, INSERT, MIGRATIONS, SCHEMA_VERSION, give_back_rates, prepare

URL = "sqlite:///jobs.db"


@contextlib.contextmanager
def database(path: pathlib.Path) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        yield db
    finally:
        db.close()


def prepared(db: sqlite3.Connection) -> None:
    """`prepare` inside a write transaction, as the store calls it."""
    db.execute("BEGIN IMMEDIATE")
    try:
        prepare(db, URL)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def versions(db: sqlite3.Connection) -> list[int]:
    return [v for (v,) in db.execute("SELECT version FROM leakypool_schema ORDER BY version")]


def shape(db: sqlite3.Connection) -> dict[str, list[tuple[str, str, int, object]]]:
    """Every table's columns (name, type, not null, default) and every index's name: what a store relies on."""
    tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    found: dict[str, list[tuple[str, str, int, object]]] = {
        table: [(c[1], c[2], c[3], c[4]) for c in db.execute(f"PRAGMA table_info({table})")] for table in tables
    }
    found["indexes"] = [
        (name, "", 0, None)
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY name")
    ]
    return found


def at_version_1(db: sqlite3.Connection) -> None:
    """A file as release 1 wrote it."""
    db.execute("CREATE TABLE leakypool_schema (version INTEGER NOT NULL)")
    for statement in schema._SCHEMA_V1:
        db.execute(statement)
    db.execute("INSERT INTO leakypool_schema VALUES (1)")


JOB_V1 = (
    "INSERT INTO jobs (id, routine, state, max_attempts, created_at, deadline, next_at, payload) "
    "VALUES ('old', 'app.f', 'pending', 3, 1.0, 61.0, 1.0, x'00')"
)


class TestPrepare:
    def test_prepare_should_create_the_current_schema_when_the_file_is_empty(self, tmp_path):
        """Test that a new file is written at version 1 and migrated up, and takes the store's INSERT and SELECT."""
        with database(tmp_path / "jobs.db") as db:
            prepared(db)
            assert versions(db) == list(range(1, SCHEMA_VERSION + 1))
            db.execute(INSERT, ("j", "app.f", 3, 1.0, 61.0, 1.0, b"\0", "q", "k", "w", "", 0, 0, 5, 0, 0.0))
            (row,) = db.execute(f"SELECT {COLUMNS} FROM jobs").fetchall()
            assert row[:3] == ("j", "app.f", "pending") and row[-1] == 5  # priority, the last column

    def test_prepare_should_leave_a_current_file_as_it_is_when_run_again(self, tmp_path):
        """Test that opening a store twice adds no version and changes no table."""
        with database(tmp_path / "jobs.db") as db:
            prepared(db)
            before = shape(db)
            prepared(db)
            assert versions(db) == list(range(1, SCHEMA_VERSION + 1))
            assert shape(db) == before

    @pytest.mark.parametrize("start", range(1, SCHEMA_VERSION))
    def test_prepare_should_migrate_an_older_file_to_the_new_files_schema_keeping_its_jobs(self, tmp_path, start):
        """Test that a file an earlier release wrote ends with the schema a new file gets, its jobs kept
        with the new columns' defaults (priority 0, no rate)."""
        with database(tmp_path / "fresh.db") as fresh:
            prepared(fresh)
            expected = shape(fresh)
        with database(tmp_path / "old.db") as db:
            at_version_1(db)
            for step in range(2, start + 1):
                for statement in MIGRATIONS[step]:
                    db.execute(statement)
                db.execute("INSERT INTO leakypool_schema VALUES (?)", (step,))
            db.execute(JOB_V1)
            prepared(db)
            assert versions(db) == list(range(1, SCHEMA_VERSION + 1))
            assert shape(db) == expected
            assert db.execute("SELECT id, state, priority, rate, rate_per FROM jobs").fetchall() == [
                ("old", "pending", 0, 0, 0.0)
            ]

    def test_prepare_should_refuse_another_applications_database_and_leave_it_untouched(self, tmp_path):
        """Test that a SQLite file with tables of its own is named as something else, not taken over."""
        with database(tmp_path / "app.db") as db:
            db.execute("CREATE TABLE users (name TEXT)")
            with pytest.raises(ConfigError, match=r"a SQLite database of something else \(tables \['users'\]\)"):
                prepared(db)
            assert [n for (n,) in db.execute("SELECT name FROM sqlite_master")] == ["users"]

    def test_prepare_should_refuse_a_newer_schema_and_leave_the_file_untouched(self, tmp_path):
        """Test that a file a later release wrote is refused with the versions named, nothing migrated."""
        with database(tmp_path / "jobs.db") as db:
            prepared(db)
            db.execute("INSERT INTO leakypool_schema VALUES (?)", (SCHEMA_VERSION + 1,))
            before = shape(db)
            with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1} is newer than this release's"):
                prepared(db)
            assert shape(db) == before
            assert versions(db)[-1] == SCHEMA_VERSION + 1

    def test_migrations_should_cover_every_version_after_the_first_and_none_beyond(self):
        """Test that each version up to SCHEMA_VERSION has its step (a missing one would skip statements)."""
        assert sorted(MIGRATIONS) == list(range(2, SCHEMA_VERSION + 1))


class TestGiveBackRates:
    def test_give_back_rates_should_delete_only_the_newest_rate_row_of_each_rated_job(self, tmp_path):
        """Test that a job given back frees the slot of its last lease; its earlier attempts (which started)
        still count, and a job without a rate frees nothing."""
        with database(tmp_path / "jobs.db") as db:
            prepared(db)
            rows = [
                ("q", "", 1.0, 99.0, "a"),
                ("q", "", 2.0, 99.0, "a"),
                ("q", "", 1.5, 99.0, "b"),
                ("q", "", 5.0, 99.0, "c"),
            ]
            db.executemany("INSERT INTO rate_starts (queue, key, at, expires, job) VALUES (?, ?, ?, ?, ?)", rows)
            give_back_rates(db, [("a", 2), ("b", 1), ("c", 0), ("unknown", 3)])
            left = db.execute("SELECT job, at FROM rate_starts ORDER BY job, at").fetchall()
            assert left == [("a", 1.0), ("c", 5.0)]
