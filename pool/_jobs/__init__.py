"""Durable jobs: calls written to a store first, so they survive the dispatching process.

    _store       the store protocol and its records (no I/O)
    _sqlite      SQLiteStore: the embedded default, one file
    _sqlite_thread  the thread that owns its connection and group-commits
    _postgres    PostgresStore: several hosts (asyncpg, the postgres extra)
    _postgres_sql  its schema and statements
    _batch       group commit for a networked store (concurrent writes share a statement)
    _open        store= URL or object -> a store
    _codec       a job's payload (the call and its retry policy)
    _job         pool.Job (what a caller holds) and Jobs (WorkerPool.jobs)
    _scheduler   leases due jobs, dispatches them like calls, records outcomes
    _presence    the process's owner lease, dead owners' recovery, other processes' notices
    _attempt     one attempt, and the I/O-free decision on its outcome (retry, fail, succeed)
"""

from __future__ import annotations

from ._job import Job as Job
from ._job import Jobs as Jobs
from ._open import open_store as open_store
from ._postgres import PostgresStore as PostgresStore
from ._scheduler import Scheduler as Scheduler
from ._sqlite import SQLiteStore as SQLiteStore
from ._store import JobStore as JobStore

__all__ = ["Job", "JobStore", "Jobs", "PostgresStore", "SQLiteStore", "Scheduler", "open_store"]
