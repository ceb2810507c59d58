"""`SQLiteStore`: the embedded default job store, one file, on a thread of its own.

The standard library's ``sqlite3`` blocks, so one thread per store owns the
connection (`SQLiteThread`) and the event loop never waits on disk; its
writes are group committed, a burst of 256 submits costs a handful of
commits, not 256.

WAL mode lets readers and one writer work at once, and several processes
may share the file (``BEGIN IMMEDIATE`` takes the write lock up front, so
two processes never lease the same job). ``synchronous=NORMAL`` (the
default here): a committed job survives a crash of the process; a power
loss may lose the last commits (``synchronous="FULL"`` closes that gap at
the cost of an fsync per commit).
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import time
from typing import Any, Final

from ..._base import public
from ..._errors import AdmissionRejected, ConfigError, StoreError
from .. import _store
from .._store import ACTIVE_STATES, HELD_BACK_SQL, LEASE_ORDER, LIMITED_DUE_SQL, TERMINAL_STATES, JobRecord, NewJob
from ._pauses import PAUSED_TABLE, sqlite_pause, sqlite_paused, sqlite_resume
from ._sqlite_schema import COLUMNS as _COLUMNS
from ._sqlite_schema import INSERT as _INSERT
from ._sqlite_schema import SCHEMA_VERSION as SCHEMA_VERSION
from ._sqlite_schema import give_back_rates, prepare
from ._sqlite_thread import SINGLE, Op, SQLiteThread, T
from ._strays import Strays, sqlite_reconcile, sqlite_recover, sqlite_release


def _record(row: tuple[Any, ...]) -> JobRecord:
    values = list(row)
    values[14] = bool(values[14])
    return JobRecord(*values)


class SQLiteStore:
    """Jobs in one SQLite file (``sqlite:///ABSOLUTE/PATH``).

    Args:
        path: The database file; created, with its schema, on first use.
        synchronous: ``"NORMAL"`` (commits survive a process crash) or ``"FULL"``
            (they survive a power loss too; slower).
    """

    def __init__(self, path: str, *, synchronous: str = "NORMAL") -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ConfigError(f"synchronous: expected 'NORMAL' or 'FULL', got {synchronous!r}")
        self.path: str = os.path.abspath(path)
        self.url: str = f"sqlite:///{self.path}"
        self._synchronous = synchronous
        self._thread: SQLiteThread | None = None

    @classmethod
    def from_url(cls, url: str) -> SQLiteStore:
        """``sqlite:///var/lib/app/jobs.db`` names ``/var/lib/app/jobs.db``: the path is always absolute.

        (Four slashes, as other tools write an absolute path, mean the same.)
        For a relative path, construct ``SQLiteStore(path)`` yourself.

        Raises:
            ConfigError: another scheme, or no path.
        """
        rest = url[len("sqlite://") :].lstrip("/") if url.startswith("sqlite:///") else ""
        if not rest:
            raise ConfigError(f"store: expected sqlite:///ABSOLUTE/PATH, got {url!r}")
        return cls("/" + rest)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.url!r})"

    # -- the thread ------------------------------------------------------------------

    async def open(self) -> None:
        """Start the thread, open the file, create or check the schema.

        Raises:
            ConfigError: the file cannot be opened, is not a SQLite database,
                is another application's database, or has a newer schema.
        """
        if self._thread is not None:
            return
        if os.path.isdir(self.path):  # noqa: ASYNC240 - one stat at open, before the store has its thread
            raise ConfigError(f"store {self.url}: is a directory, not a database file")
        self._thread = SQLiteThread(self.path, self.url, self._synchronous)
        try:
            await self._run(self._prepare, write=True)
        except StoreError as exc:
            await self.close()
            raise ConfigError(f"store {self.url}: {exc.__cause__ or exc}") from None
        except BaseException:  # refused (ConfigError), or cancelled: the thread closes the connection and ends
            await self.close()
            raise

    async def close(self) -> None:
        """Finish what is queued, close the connection, stop the thread; idempotent."""
        thread, self._thread = self._thread, None
        if thread is not None:
            await thread.stop()

    async def _run(self, op: Op[T], *, write: bool | str) -> T:
        if self._thread is None:
            raise StoreError(f"store {self.url} is not open")
        return await self._thread.run(op, write=write)

    # -- schema ----------------------------------------------------------------------

    def _prepare(self, db: sqlite3.Connection) -> None:
        prepare(db, self.url)
        db.execute(PAUSED_TABLE)  # added after schema 1: created on open (the write lock held), no migration

    # -- reads -----------------------------------------------------------------------

    async def get(self, job_id: str) -> JobRecord | None:
        row = await self._run(
            lambda db: db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone(), write=False
        )
        return None if row is None else _record(row)

    async def list(self, state: str | None = None, limit: int = 100, newest: bool = False) -> list[JobRecord]:
        order = "created_at DESC, rowid DESC" if newest else "created_at, rowid"
        args: tuple[object, ...]
        if state is None:
            sql, args = f"SELECT {_COLUMNS} FROM jobs ORDER BY {order} LIMIT ?", (limit,)
        else:
            sql, args = f"SELECT {_COLUMNS} FROM jobs WHERE state = ? ORDER BY {order} LIMIT ?", (state, limit)
        rows = await self._run(lambda db: db.execute(sql, args).fetchall(), write=False)
        return [_record(row) for row in rows]

    async def counts(self) -> dict[str, int]:
        rows = await self._run(
            lambda db: db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall(), write=False
        )
        counts = dict.fromkeys(sorted(ACTIVE_STATES | TERMINAL_STATES), 0)
        counts.update(rows)
        return counts

    async def count_active(self) -> int:
        return await self._run(_count_active, write=False)

    async def cancel_requested(self, owner: str) -> builtins.list[str]:
        sql = "SELECT id FROM jobs WHERE state = 'running' AND owner = ? AND cancel_requested"
        return [row[0] for row in await self._run(lambda db: db.execute(sql, (owner,)).fetchall(), write=False)]

    async def oldest_due(self, now: float) -> float | None:
        sql = "SELECT min(next_at) FROM jobs WHERE state = 'pending' AND owner = ''"
        due: float | None = (await self._run(lambda db: db.execute(sql).fetchone(), write=False))[0]
        return due

    async def next_due(self, now: float) -> float | None:
        sql = "SELECT min(next_at) FROM jobs WHERE state = 'pending' AND owner = '' AND next_at > ?"
        due: float | None = (await self._run(lambda db: db.execute(sql, (now,)).fetchone(), write=False))[0]
        return due

    # -- writes ----------------------------------------------------------------------

    async def submit(self, job: NewJob, max_active: int | None = None, owner: str = "") -> tuple[JobRecord, bool]:
        values = job.values(owner)

        def op(db: sqlite3.Connection) -> tuple[JobRecord, bool]:
            if max_active is None:  # the common case: one statement when the id is new
                row = db.execute(_INSERT + " ON CONFLICT (id) DO NOTHING RETURNING " + _COLUMNS, values).fetchone()
                if row is not None:
                    return _record(row), True
            row = db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job.id,)).fetchone()
            if row is not None and row[2] in ACTIVE_STATES:
                return _record(row), False
            if max_active is not None and (active := _count_active(db)) >= max_active:
                raise AdmissionRejected(
                    f"{job.routine}() refused: {active} jobs already active in {self.url} (max_pending={max_active})",
                    retry_after=1.0,
                )
            if row is not None:
                db.execute("DELETE FROM jobs WHERE id = ?", (job.id,))
            return _record(db.execute(_INSERT + " RETURNING " + _COLUMNS, values).fetchone()), True

        return await self._run(op, write=True)

    async def lease(self, owner: str, limit: int, now: float) -> builtins.list[JobRecord]:
        """Due jobs, oldest first: any without limits, and those whose limits fit (see LIMITED_DUE_SQL).

        The write transaction (BEGIN IMMEDIATE) is the lease lock: leases of
        all processes on this file run one at a time.
        """

        def op(db: sqlite3.Connection) -> list[JobRecord]:
            free = db.execute(_FREE_DUE, (now, limit)).fetchall()
            limited = db.execute(_LIMITED_DUE, {"now": now, "limit": limit}).fetchall()
            chosen = sorted(free + limited, key=lambda r: (-r[3], r[1], r[2], r[0]))[:limit]
            rows = []
            for job_id, *_ in chosen:
                rows.append(
                    db.execute(
                        f"UPDATE jobs SET owner = ? WHERE id = ? RETURNING {_COLUMNS}", (owner, job_id)
                    ).fetchone()
                )
            if limited:  # rate limits: count these leases, hold back what they leave no room for
                starts = [(r[4], r[5], now, now + r[7], r[0]) for r in chosen if len(r) > 4 and r[6] > 0]
                db.executemany(_RECORD_STARTS, starts)
                db.execute("DELETE FROM rate_starts WHERE expires < ?", (now,))
            db.execute(_HELD_BACK, {"now": now})
            return [_record(row) for row in rows]

        return await self._run(op, write=True)

    async def unlease(self, owner: str, ids: builtins.list[str], next_at: float | None = None) -> None:
        def op(db: sqlite3.Connection) -> None:
            given = [
                db.execute(
                    "UPDATE jobs SET owner = '', next_at = coalesce(?, next_at) "
                    "WHERE id = ? AND owner = ? AND state = 'pending' RETURNING id, rate",
                    (next_at, job_id, owner),
                ).fetchone()
                for job_id in ids
            ]
            give_back_rates(db, [row for row in given if row is not None])  # not started: their slots too

        await self._run(op, write=True)

    async def _update(self, sql: str, args: tuple[Any, ...]) -> bool:
        return await self._run(lambda db: db.execute(sql, args).rowcount == 1, write=SINGLE)

    async def mark_running(self, job_id: str, owner: str, now: float) -> bool:
        return await self._update(
            "UPDATE jobs SET state = 'running', attempts = attempts + 1, started_at = ? "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            (now, job_id, owner),
        )

    async def finish(
        self,
        job_id: str,
        owner: str,
        state: str,
        now: float,
        *,
        outcome: bytes | None,
        error: str = "",
        started: float | None = None,
    ) -> bool:
        _store.require_terminal(state)
        return await self._update(
            "UPDATE jobs SET state = ?, finished_at = ?, outcome = ?, error = ?, owner = '', "
            "attempts = attempts + (state = 'pending'), "
            "started_at = CASE WHEN state = 'pending' THEN ? ELSE started_at END "
            "WHERE id = ? AND owner = ? AND (state = 'running' OR (state = 'pending' AND ? IS NOT NULL))",
            (state, now, outcome, error, started, job_id, owner, started),
        )

    async def retry(self, job_id: str, owner: str, next_at: float, error: str) -> bool:
        return await self._update(
            "UPDATE jobs SET state = 'pending', owner = '', next_at = ?, error = ? "
            "WHERE id = ? AND owner = ? AND state = 'running'",
            (next_at, error, job_id, owner),
        )

    async def fail_pending(self, job_id: str, owner: str, now: float, error: str, outcome: bytes | None = None) -> bool:
        return await self._update(
            "UPDATE jobs SET state = 'failed', finished_at = ?, error = ?, outcome = ?, owner = '' "
            "WHERE id = ? AND owner = ? AND state = 'pending'",
            (now, error, outcome, job_id, owner),
        )

    async def cancel(self, job_id: str, now: float) -> JobRecord | None:
        def op(db: sqlite3.Connection) -> JobRecord | None:
            db.execute(
                "UPDATE jobs SET state = 'cancelled', finished_at = ?, owner = '', error = 'cancelled before it ran' "
                "WHERE id = ? AND state = 'pending'",
                (now, job_id),
            )
            db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ? AND state = 'running'", (job_id,))
            row = db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return None if row is None else _record(row)

        return await self._run(op, write=True)

    async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT INTO owners VALUES (?, ?) "  # never backwards, as on PostgreSQL
                "ON CONFLICT (owner) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)",
                (owner, now + ttl),
            ),
            write=True,
        )

    async def recover(self, now: float) -> builtins.list[str]:
        return await self._run(lambda db: sqlite_recover(db, now), write=True)

    async def release_owner(self, owner: str, now: float) -> None:
        await self._run(lambda db: sqlite_release(db, owner, now), write=True)

    async def reconcile(self, owner: str, keep: builtins.list[str], now: float) -> Strays:
        """Give back ``owner``'s pending and running jobs other than ``keep`` (see `_strays`)."""
        return await self._run(lambda db: sqlite_reconcile(db, owner, keep, now), write=True)

    # -- paused queues (`_pauses`; the other processes see them at their tick) ----------------

    async def pause(self, queue: str) -> None:
        """Lease no more of ``queue``'s pending jobs, in any process on this file."""
        await self._run(lambda db: sqlite_pause(db, queue, time.time()), write=True)

    async def resume(self, queue: str) -> None:
        """Lease ``queue``'s pending jobs again."""
        now = time.time()
        await self._run(lambda db: sqlite_resume(db, queue, now), write=True)

    async def paused(self) -> builtins.list[str]:
        """The paused queues' names, sorted."""
        return await self._run(sqlite_paused, write=False)

    # -- maintenance (retention, the jobs command) -------------------------------------

    async def purge(self, finished_before: float, limit: int) -> int:
        """One bounded batch, oldest finished first (the write lock is held for this batch only)."""
        return await self._run(lambda db: db.execute(_PURGE, (finished_before, limit)).rowcount, write=SINGLE)

    async def select(
        self, state: str | None = None, routine: str | None = None, limit: int = 100
    ) -> builtins.list[JobRecord]:
        sql = (
            f"SELECT {_COLUMNS} FROM jobs WHERE (? IS NULL OR state = ?) AND (? IS NULL OR routine = ?) "
            "ORDER BY created_at DESC, rowid DESC LIMIT ?"
        )
        rows = await self._run(
            lambda db: db.execute(sql, (state, state, routine, routine, limit)).fetchall(), write=False
        )
        return [_record(row) for row in rows]

    async def schedule_slot(self, name: str, slot: float, job: NewJob | None) -> float | None:
        def op(db: sqlite3.Connection) -> float | None:  # the write lock (BEGIN IMMEDIATE) orders the processes
            row = db.execute("SELECT last_slot FROM schedules WHERE name = ?", (name,)).fetchone()
            previous = None if row is None else row[0]
            if (job is None and previous is None) or (job is not None and (previous is None or previous < slot)):
                db.execute(
                    "INSERT INTO schedules VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET last_slot = ?",
                    (name, slot, slot),
                )
            if job is not None and (previous is None or previous < slot):
                db.execute(_INSERT + " ON CONFLICT (id) DO NOTHING", job.values(""))
            return previous

        return await self._run(op, write=True)

    async def reseal(self, job_id: str, payload: bytes, outcome: bytes | None, was: tuple[bytes, bytes | None]) -> bool:
        def op(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "UPDATE jobs SET payload = ?, outcome = ? WHERE id = ? AND payload = ? AND outcome IS ?",
                (payload, outcome, job_id, was[0], was[1]),
            )
            return cursor.rowcount == 1

        return await self._run(op, write=True)

    async def requeue(self, job_id: str, now: float) -> JobRecord | None:
        def op(db: sqlite3.Connection) -> JobRecord | None:
            row = db.execute(_REQUEUE + " RETURNING " + _COLUMNS, (now, now, job_id)).fetchone()
            if row is None:
                row = db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
            return None if row is None else _record(row)

        return await self._run(op, write=True)


_FREE_DUE: Final[str] = (
    # INDEXED BY: read in lease order from the partial index of unowned pending jobs and stop at the limit
    # (the planner, without statistics, would take jobs_due for the next_at range and sort every due job).
    "SELECT id, next_at, created_at, priority FROM jobs INDEXED BY jobs_lease "
    "WHERE state = 'pending' AND owner = '' AND next_at <= ? "
    f"AND queue = '' AND workflow = '' ORDER BY {LEASE_ORDER} LIMIT ?"
)
# Named placeholders, bound from a mapping: {now} occurs several times in these. Numbered ones (?1) bound from a
# sequence are deprecated since Python 3.12 and an error from 3.14 (sqlite3: "Binding 1 ('?1') is a named parameter").
_LIMITED_DUE: Final[str] = LIMITED_DUE_SQL.format(table="jobs", starts="rate_starts", now=":now", limit=":limit")
_HELD_BACK: Final[str] = HELD_BACK_SQL.format(
    table="jobs", starts="rate_starts", now=":now", rated_index="INDEXED BY jobs_rated"
)
_RECORD_STARTS: Final[str] = "INSERT INTO rate_starts (queue, key, at, expires, job) VALUES (?, ?, ?, ?, ?)"


def _count_active(db: sqlite3.Connection) -> int:
    count: int = db.execute("SELECT count(*) FROM jobs WHERE state IN ('pending', 'running')").fetchone()[0]
    return count


_PURGE: Final[str] = (
    "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN ('succeeded', 'failed', 'cancelled') "
    "AND finished_at < ? ORDER BY finished_at LIMIT ?)"
)
_REQUEUE: Final[str] = (
    "UPDATE jobs SET state = 'pending', owner = '', next_at = ?, deadline = ? + max(deadline - next_at, 1), "
    "max_attempts = max(max_attempts, attempts + 1), finished_at = NULL, outcome = NULL, cancel_requested = 0 "
    "WHERE id = ? AND state IN ('failed', 'cancelled')"
)

public(SQLiteStore)
