"""Durable jobs: calls written to a store first, so they survive the dispatching process.

_store       the store protocol and its records (no I/O)
_stores/     SQLiteStore, PostgresStore, and store= URL -> a store
_codec       a job's payload (the call and its retry policy)
_job         pool.Job (what a caller holds) and Jobs (WorkerPool.jobs)
_scheduler   leases due jobs, dispatches them like calls
_due         when the store's next job comes due (the scheduler sleeps until then)
_placements  how many leased jobs are offered to workers at once (a slow start)
_attend      one placement seen through: Accept, running, outcome (or back to waiting, or to the store)
_holdings    the jobs one process holds, from adoption to their end (the scheduler's and its Attendant's)
_recorder    what an accepted attempt writes: running, then its outcome or a retry
_presence    the process's owner lease, dead owners' recovery, other processes' notices
_lease       when a held job may start, from the owner lease's renewals (I/O-free)
_attempt     one attempt, and the I/O-free decision on its outcome (retry, fail, succeed)
_retention   keep_finished: finished jobs purged in bounded batches
_periodic    WorkerPool.schedule: one job per cron slot, across processes
_pause       the paused queues as one process sees them, and the leased jobs to give back

The command line over a store (``leakypool jobs``) is the surface's: pool._cli.
"""

from __future__ import annotations

from ._codec import reseal as reseal
from ._job import Job as Job
from ._job import Jobs as Jobs
from ._job import queue_name as queue_name
from ._retention import PURGE_BATCH as PURGE_BATCH
from ._scheduler import Scheduler as Scheduler
from ._store import ACTIVE_STATES as ACTIVE_STATES
from ._store import TERMINAL_STATES as TERMINAL_STATES
from ._store import JobRecord as JobRecord
from ._store import JobStore as JobStore
from ._store import MaintainedStore as MaintainedStore
from ._store import PausableStore as PausableStore
from ._store import ResealableStore as ResealableStore
from ._stores._open import open_store as open_store
from ._stores._open import open_waiting as open_waiting
from ._stores._postgres import PostgresStore as PostgresStore
from ._stores._sqlite import SQLiteStore as SQLiteStore

__all__ = [
    "ACTIVE_STATES",
    "PURGE_BATCH",
    "TERMINAL_STATES",
    "Job",
    "JobRecord",
    "JobStore",
    "Jobs",
    "MaintainedStore",
    "PausableStore",
    "PostgresStore",
    "ResealableStore",
    "SQLiteStore",
    "Scheduler",
    "open_store",
    "open_waiting",
    "queue_name",
    "reseal",
]
