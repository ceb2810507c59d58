"""The SQLite store's schema, its migrations, and the statements it shares (text and one function, no threads).

A file is created at version 1 and brought up to `SCHEMA_VERSION` by the
same migrations a file written by an earlier release goes through, so the
upgrade path is the one every new store takes (and is tested by it).
"""

from __future__ import annotations

import sqlite3
from typing import Final

from ..._errors import ConfigError
from .._store import LEASE_ORDER

SCHEMA_VERSION: Final[int] = 3
"""The schema this release writes; an older file is migrated, a newer one refused."""

_SCHEMA_V1: Final[tuple[str, ...]] = (
    """CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        routine TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        created_at REAL NOT NULL,
        started_at REAL,
        finished_at REAL,
        deadline REAL NOT NULL,
        next_at REAL NOT NULL,
        owner TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        payload BLOB NOT NULL,
        outcome BLOB,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        queue TEXT NOT NULL DEFAULT '',
        key TEXT NOT NULL DEFAULT '',
        workflow TEXT NOT NULL DEFAULT '',
        concurrency INTEGER NOT NULL DEFAULT 0,
        total INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX jobs_due ON jobs (state, owner, next_at, created_at)",
    "CREATE INDEX jobs_owned ON jobs (owner) WHERE owner != ''",
    "CREATE TABLE owners (owner TEXT PRIMARY KEY, expires_at REAL NOT NULL)",
)

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    2: (
        "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        # The lease reads unowned pending jobs in lease order: this partial index holds
        # only those, so a million finished jobs beside them cost the lease nothing.
        f"CREATE INDEX jobs_lease ON jobs ({LEASE_ORDER}) WHERE state = 'pending' AND owner = ''",
        # Retention deletes the oldest finished jobs first, a bounded batch at a time.
        "CREATE INDEX jobs_finished ON jobs (finished_at) WHERE state IN ('succeeded', 'failed', 'cancelled')",
        # Periodic jobs: the last slot each schedule submitted (so every slot is submitted once).
        "CREATE TABLE schedules (name TEXT PRIMARY KEY, last_slot REAL NOT NULL)",
        # Rate limits: each job's queue rate, and the recent leases they are counted against.
        "ALTER TABLE jobs ADD COLUMN rate INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN rate_per REAL NOT NULL DEFAULT 0",
        "CREATE TABLE rate_starts (queue TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL, expires REAL NOT NULL)",
        "CREATE INDEX rate_starts_key ON rate_starts (queue, key, at)",
        "CREATE INDEX rate_starts_expires ON rate_starts (expires)",
        "CREATE INDEX jobs_rated ON jobs (next_at) WHERE state = 'pending' AND owner = '' AND rate > 0",
    ),
    3: (
        # A lease's rate row names its job, so a job given back before it started gives back its slot too.
        "ALTER TABLE rate_starts ADD COLUMN job TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX rate_starts_job ON rate_starts (job)",
    ),
}
"""Statements that bring a file from version ``n - 1`` to ``n`` (in one transaction with the rest)."""

COLUMNS: Final[str] = (
    "id, routine, state, attempts, max_attempts, created_at, started_at, finished_at, deadline, next_at, "
    "owner, error, payload, outcome, cancel_requested, queue, key, workflow, priority"
)

INSERT: Final[str] = (
    "INSERT INTO jobs (id, routine, state, max_attempts, created_at, deadline, next_at, payload, queue, key, workflow, "
    "owner, concurrency, total, priority, rate, rate_per) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


GIVE_BACK_RATE: Final[str] = (
    # The newest of the job's rate rows is its lease's; older ones are attempts that did start and still count.
    "DELETE FROM rate_starts WHERE rowid = (SELECT rowid FROM rate_starts WHERE job = ? ORDER BY at DESC LIMIT 1)"
)


def give_back_rates(db: sqlite3.Connection, given: list[tuple[str, int]]) -> None:
    """The rate slots of pending jobs given back before they started (``given``: their (id, rate) rows)."""
    db.executemany(GIVE_BACK_RATE, [(job_id,) for job_id, rate in given if rate > 0])


def prepare(db: sqlite3.Connection, url: str) -> None:
    """Create the schema in an empty file, or migrate an older one (inside the caller's write transaction).

    Raises:
        ConfigError: another application's database, or a newer schema (the file left untouched).
    """
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "leakypool_schema" not in tables:
        if tables:
            raise ConfigError(
                f"store {url}: a SQLite database of something else (tables {sorted(tables)}), not a leakypool job store"
            )
        db.execute("CREATE TABLE leakypool_schema (version INTEGER NOT NULL)")
        for statement in _SCHEMA_V1:
            db.execute(statement)
        db.execute("INSERT INTO leakypool_schema VALUES (1)")
    (version,) = db.execute("SELECT max(version) FROM leakypool_schema").fetchone()
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"store {url}: schema version {version} is newer than this release's ({SCHEMA_VERSION}); "
            "upgrade leakypool (the file was left untouched)"
        )
    for step in range(version + 1, SCHEMA_VERSION + 1):
        for statement in MIGRATIONS[step]:
            db.execute(statement)
        db.execute("INSERT INTO leakypool_schema VALUES (?)", (step,))
