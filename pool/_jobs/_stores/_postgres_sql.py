"""The PostgreSQL store's schema and statements (text only, no I/O).

Batched writes pass one array per column and ``unnest`` them, so a batch
is one statement and one commit, whatever its size.
"""

from __future__ import annotations

from typing import Final

from .._store import HELD_BACK_SQL, LEASE_ORDER, LIMITED_DUE_SQL

SCHEMA_VERSION: Final[int] = 3
"""The schema this release writes; an older one is migrated (`MIGRATIONS`), a newer one refused, untouched."""

LOCK_SCHEMA: Final[int] = 0x6C70_0001
"""Advisory lock key: one process creates or migrates the schema at a time."""

LOCK_CEILING: Final[int] = 0x6C70_0002
"""Advisory lock key: submits under a ceiling count active jobs one at a time."""

LOCK_LEASE: Final[int] = 0x6C70_0003
"""Advisory lock key: leases of jobs with limits count held slots one process at a time."""

LOCK_PURGE: Final[int] = 0x6C70_0004
"""Advisory lock key: one process purges finished jobs at a time (the others skip their turn)."""

LOCK_SCHEDULE: Final[int] = 0x6C70_0005
"""Advisory lock class (with the schedule name's hash): one process records a schedule's slot at a time."""

CHANNEL: Final[str] = "leakypool_jobs"
"""The LISTEN/NOTIFY channel; payload ``"<sender> due"`` or ``"<sender> cancel <owner>"``."""

SCHEMA_V1: Final[tuple[str, ...]] = (
    "CREATE TABLE leakypool_schema (version INTEGER NOT NULL)",
    """CREATE TABLE leakypool_jobs (
        id TEXT PRIMARY KEY,
        routine TEXT NOT NULL,
        state TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION,
        finished_at DOUBLE PRECISION,
        deadline DOUBLE PRECISION NOT NULL,
        next_at DOUBLE PRECISION NOT NULL,
        owner TEXT NOT NULL DEFAULT '',
        error TEXT NOT NULL DEFAULT '',
        payload BYTEA NOT NULL,
        outcome BYTEA,
        cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
        queue TEXT NOT NULL DEFAULT '',
        key TEXT NOT NULL DEFAULT '',
        workflow TEXT NOT NULL DEFAULT '',
        concurrency INTEGER NOT NULL DEFAULT 0,
        total INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX leakypool_jobs_due ON leakypool_jobs (state, owner, next_at, created_at)",
    "CREATE INDEX leakypool_jobs_owned ON leakypool_jobs (owner) WHERE owner <> ''",
    "CREATE TABLE leakypool_owners (owner TEXT PRIMARY KEY, expires_at DOUBLE PRECISION NOT NULL)",
)
"""What a new database starts from; `MIGRATIONS` bring it (and a database of an earlier release) up to date."""

MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    2: (
        "ALTER TABLE leakypool_jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        # The lease reads unowned pending jobs in lease order: this partial index holds
        # only those, so a million finished jobs beside them cost the lease nothing.
        f"CREATE INDEX leakypool_jobs_lease ON leakypool_jobs ({LEASE_ORDER}) WHERE state = 'pending' AND owner = ''",
        # Retention deletes the oldest finished jobs first, a bounded batch at a time.
        (
            "CREATE INDEX leakypool_jobs_finished ON leakypool_jobs (finished_at) "
            "WHERE state IN ('succeeded', 'failed', 'cancelled')"
        ),
        # Periodic jobs: the last slot each schedule submitted (so every slot is submitted once).
        "CREATE TABLE leakypool_schedules (name TEXT PRIMARY KEY, last_slot DOUBLE PRECISION NOT NULL)",
        # Rate limits: each job's queue rate, and the recent leases they are counted against.
        "ALTER TABLE leakypool_jobs ADD COLUMN rate INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE leakypool_jobs ADD COLUMN rate_per DOUBLE PRECISION NOT NULL DEFAULT 0",
        (
            "CREATE TABLE leakypool_rate_starts (queue TEXT NOT NULL, key TEXT NOT NULL, at DOUBLE PRECISION NOT NULL, "
            "expires DOUBLE PRECISION NOT NULL)"
        ),
        "CREATE INDEX leakypool_rate_starts_key ON leakypool_rate_starts (queue, key, at)",
        "CREATE INDEX leakypool_rate_starts_expires ON leakypool_rate_starts (expires)",
        "CREATE INDEX leakypool_jobs_rated ON leakypool_jobs (next_at) WHERE state = 'pending' AND owner = '' AND rate > 0",
    ),
    3: (
        # A lease's rate row names its job, so a job given back before it started gives back its slot too.
        "ALTER TABLE leakypool_rate_starts ADD COLUMN job TEXT NOT NULL DEFAULT ''",
        "CREATE INDEX leakypool_rate_starts_job ON leakypool_rate_starts (job)",
    ),
}
"""Statements that bring a database from version ``n - 1`` to ``n`` (one transaction, under `LOCK_SCHEMA`)."""

COLUMNS: Final[str] = (
    "id, routine, state, attempts, max_attempts, created_at, started_at, finished_at, deadline, next_at, "
    "owner, error, payload, outcome, cancel_requested, queue, key, workflow, priority"
)

_INSERTED: Final[str] = (
    "INSERT INTO leakypool_jobs (id, routine, state, max_attempts, created_at, deadline, next_at, payload, queue, "
    "key, workflow, owner, concurrency, total, priority, rate, rate_per) "
)

INSERT: Final[str] = (
    _INSERTED + "VALUES ($1, $2, 'pending', $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
)

INSERT_MANY: Final[str] = (
    _INSERTED + "SELECT id, routine, 'pending', max_attempts, created_at, deadline, next_at, payload, queue, key, "
    "workflow, owner, concurrency, total, priority, rate, rate_per FROM unnest($1::text[], $2::text[], $3::int[], "
    "$4::float8[], $5::float8[], $6::float8[], $7::bytea[], $8::text[], $9::text[], $10::text[], $11::text[], "
    "$12::int[], $13::int[], $14::int[], $15::int[], $16::float8[]) AS v(id, routine, max_attempts, created_at, "
    "deadline, next_at, payload, queue, key, workflow, owner, concurrency, total, priority, rate, rate_per) "
    f"ON CONFLICT (id) DO NOTHING RETURNING {COLUMNS}"
)
"""New jobs in one statement, one array per `NewJob.values` column (`INSERT`'s order); an id already present is
skipped (the caller takes the one-row path for it)."""

MARK_RUNNING_MANY: Final[str] = (
    "UPDATE leakypool_jobs AS j SET state = 'running', attempts = j.attempts + 1, started_at = v.now "
    "FROM unnest($1::text[], $2::text[], $3::float8[]) AS v(id, owner, now) "
    "WHERE j.id = v.id AND j.owner = v.owner AND j.state = 'pending' RETURNING j.id"
)

FINISH_MANY: Final[str] = (
    "UPDATE leakypool_jobs AS j SET state = v.state, finished_at = v.now, outcome = v.outcome, error = v.error, "
    "owner = '', attempts = j.attempts + CASE WHEN j.state = 'pending' THEN 1 ELSE 0 END, "
    "started_at = CASE WHEN j.state = 'pending' THEN v.started ELSE j.started_at END "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::bytea[], $6::text[], $7::float8[]) "
    "AS v(id, owner, state, now, outcome, error, started) "
    "WHERE j.id = v.id AND j.owner = v.owner "
    "AND (j.state = 'running' OR (j.state = 'pending' AND v.started IS NOT NULL)) "
    "RETURNING j.id, j.queue <> '' OR j.workflow <> ''"
)
"""Outcomes, many at once; a row with ``started`` may also go straight from pending (never marked running)."""
"""Outcomes in one statement; each returned row says whether the job held a limit slot (now free)."""

NOTIFY: Final[str] = "SELECT pg_notify($1, $2)"

FREE_DUE: Final[str] = (
    "SELECT id, next_at, created_at, priority FROM leakypool_jobs WHERE state = 'pending' AND owner = '' "
    f"AND next_at <= $1 AND queue = '' AND workflow = '' ORDER BY {LEASE_ORDER} LIMIT $2 FOR UPDATE SKIP LOCKED"
)
ANY_LIMITED_DUE: Final[str] = (
    "SELECT EXISTS (SELECT 1 FROM leakypool_jobs WHERE state = 'pending' AND owner = '' AND next_at <= $1 "
    "AND (queue <> '' OR workflow <> ''))"
)
LIMITED_DUE: Final[str] = LIMITED_DUE_SQL.format(
    table="leakypool_jobs", starts="leakypool_rate_starts", now="$1::float8", limit="$2"
)
HELD_BACK: Final[str] = HELD_BACK_SQL.format(
    table="leakypool_jobs", starts="leakypool_rate_starts", now="$1::float8", rated_index=""
)
RECORD_STARTS: Final[str] = (
    "INSERT INTO leakypool_rate_starts (queue, key, at, expires, job) "
    "SELECT * FROM unnest($1::text[], $2::text[], $3::float8[], $4::float8[], $5::text[])"
)


def giving_back_rates(update: str) -> str:
    """``update`` (of pending jobs, ``RETURNING id, rate``), which gives back jobs before they started, made
    to give back each one's rate slot too (see `JobStore.unlease`); the statement returns their ids.

    A job's newest rate row is its lease's; older ones are attempts that did start and still count.
    """
    return (
        f"WITH back AS ({update}), gone AS (DELETE FROM leakypool_rate_starts WHERE ctid = ANY(ARRAY("
        "SELECT DISTINCT ON (s.job) s.ctid FROM leakypool_rate_starts AS s JOIN back ON s.job = back.id "
        "AND back.rate > 0 ORDER BY s.job, s.at DESC))) SELECT id FROM back"
    )


HEARTBEAT: Final[str] = (
    "INSERT INTO leakypool_owners VALUES ($1, $2) "
    "ON CONFLICT (owner) DO UPDATE SET expires_at = GREATEST(leakypool_owners.expires_at, $2)"
)
"""An owner lease renewed, never backwards: a try that lands after a later renewal cannot shorten it (`_lease`)."""

DEAD: Final[str] = "owner <> '' AND owner NOT IN (SELECT owner FROM leakypool_owners WHERE expires_at >= $1)"

UNLEASE: Final[str] = giving_back_rates(
    "UPDATE leakypool_jobs SET owner = '', next_at = coalesce($3, next_at) "
    "WHERE id = ANY($1::text[]) AND owner = $2 AND state = 'pending' RETURNING id, rate"
)
UNLEASE_EXCEPT: Final[str] = giving_back_rates(
    "UPDATE leakypool_jobs SET owner = '' WHERE owner = $1 AND state = 'pending' "
    "AND NOT (id = ANY($2::text[])) RETURNING id, rate"
)
REQUEUE_RUNNING_EXCEPT: Final[str] = (
    "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $3, cancel_requested = FALSE "
    "WHERE owner = $1 AND state = 'running' AND NOT (id = ANY($2::text[])) RETURNING id"
)
"""Jobs the store has running under a live owner that runs none of them (`reconcile`): pending again, due now.

Their attempt counted (a worker accepted them) and its rate slot stays spent, as when a dead owner's jobs
are revived."""
RECOVER_HELD: Final[str] = giving_back_rates(
    f"UPDATE leakypool_jobs SET owner = '' WHERE state = 'pending' AND {DEAD} RETURNING id, rate"
)
RELEASE_HELD: Final[str] = giving_back_rates(
    "UPDATE leakypool_jobs SET owner = '' WHERE state = 'pending' AND owner = $1 RETURNING id, rate"
)
"""Pending jobs a dead owner (`RECOVER_HELD`) or a closing one (`RELEASE_HELD`) leased: back, with their rate slots."""

PURGE: Final[str] = (
    "DELETE FROM leakypool_jobs WHERE id IN (SELECT id FROM leakypool_jobs "
    "WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at < $1 ORDER BY finished_at LIMIT $2 "
    "FOR UPDATE SKIP LOCKED)"
)
"""One bounded batch of finished jobs, oldest first (run under `LOCK_PURGE`, taken with a try)."""

SELECT: Final[str] = (
    f"SELECT {COLUMNS} FROM leakypool_jobs WHERE ($1::text IS NULL OR state = $1) "
    "AND ($2::text IS NULL OR routine = $2) ORDER BY created_at DESC, id DESC LIMIT $3"
)

REQUEUE: Final[str] = (
    "UPDATE leakypool_jobs SET state = 'pending', owner = '', next_at = $2, "
    "deadline = $2 + greatest(deadline - next_at, 1), max_attempts = greatest(max_attempts, attempts + 1), "
    "finished_at = NULL, outcome = NULL, cancel_requested = FALSE "
    f"WHERE id = $1 AND state IN ('failed', 'cancelled') RETURNING {COLUMNS}"
)
"""A failed or cancelled job runs again (`MaintainedStore.requeue`): its attempts and last error stay."""

NEXT_DUE: Final[str] = (
    "SELECT min(next_at) FROM leakypool_jobs WHERE state = 'pending' AND owner = '' AND next_at > $1::float8"
)
