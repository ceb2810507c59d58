"""`PostgresStore`'s hot writes, group committed: submit, mark running, finish (`BatchedWrites`, which it owns).

Every job is submitted, marked running and finished once, so these three
writes are most of a busy store's traffic. Each kind has a `Batcher`: a
write goes at once when the line is free, and the writes that arrive
meanwhile leave together as one ``unnest`` statement (`sql.INSERT_MANY`,
`sql.MARK_RUNNING_MANY`, `sql.FINISH_MANY`), so a burst costs a few
statements, not one per job. A submit under a ceiling, or whose id is
already taken, leaves the batch for the one-row path (`admin.submit_one`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..._base import TaskOwner
from .._store import JobRecord, NewJob, require_terminal
from . import _postgres_sql as sql
from ._batch import Batcher

_log = logging.getLogger("leakypool.jobs")

_Finish = tuple[
    str, str, str, float, "bytes | None", str, "float | None"
]  # id, owner, state, now, outcome, error, started


class BatchedWrites:
    """`PostgresStore`'s submit, mark_running and finish, group committed; owns their flights.

    Args:
        call: Runs one statement on the store's pool (``method``, statement, arguments).
        notify: Tells the other processes (``"due"``).
        submit_one: The one-row submit (under a ceiling, or an id already taken).
    """

    def __init__(
        self,
        call: Callable[..., Awaitable[Any]],
        notify: Callable[[str], Awaitable[None]],
        submit_one: Callable[[NewJob, int | None, str], Awaitable[tuple[JobRecord, bool]]],
    ) -> None:
        self._call = call
        self._notify = notify
        self._submit_one = submit_one
        self._tasks = TaskOwner("postgres store", _log)
        self._inserts: Batcher[tuple[NewJob, str], JobRecord | None] = Batcher(
            "submitting jobs", self._insert_many, self._tasks
        )
        self._marks: Batcher[tuple[str, str, float], bool] = Batcher(
            "marking jobs running", self._mark_many, self._tasks
        )
        self._finishes: Batcher[_Finish, bool] = Batcher("recording outcomes", self._finish_many, self._tasks)

    async def aclose(self) -> None:
        """End the flights in flight (their writers get a `StoreError`)."""
        await self._tasks.aclose()

    async def submit(self, job: NewJob, max_active: int | None = None, owner: str = "") -> tuple[JobRecord, bool]:
        """See `JobStore.submit`."""
        if max_active is None:
            record = await self._inserts((job, owner))
            if record is not None:
                return record, True
        created = await self._submit_one(job, max_active, owner)  # under the ceiling, or its id is taken
        if created[1] and not owner:
            await self._notify("due")
        return created

    async def _insert_many(self, items: list[tuple[NewJob, str]]) -> list[JobRecord | None]:
        columns = [list(column) for column in zip(*(job.values(owner) for job, owner in items), strict=True)]
        inserted = {row[0]: JobRecord(*row) for row in await self._call("fetch", sql.INSERT_MANY, *columns)}
        if any(record.owner == "" for record in inserted.values()):
            await self._notify("due")
        return [inserted.pop(job.id, None) for job, _ in items]  # a repeated id: the first one is the new job

    def mark_running(self, job_id: str, owner: str, now: float) -> Awaitable[bool]:
        """See `JobStore.mark_running`."""
        return self._marks((job_id, owner, now))

    async def _mark_many(self, items: list[tuple[str, str, float]]) -> list[bool]:
        ids, owners, times = (list(column) for column in zip(*items, strict=True))
        marked = {row[0] for row in await self._call("fetch", sql.MARK_RUNNING_MANY, ids, owners, times)}
        return [job_id in marked for job_id, _, _ in items]

    def finish(
        self,
        job_id: str,
        owner: str,
        state: str,
        now: float,
        *,
        outcome: bytes | None,
        error: str = "",
        started: float | None = None,
    ) -> Awaitable[bool]:
        """See `JobStore.finish` (its batch's future: one coroutine less per job)."""
        require_terminal(state)
        return self._finishes((job_id, owner, state, now, outcome, error, started))

    async def _finish_many(self, items: list[_Finish]) -> list[bool]:
        columns = [list(column) for column in zip(*items, strict=True)]
        rows = await self._call("fetch", sql.FINISH_MANY, *columns)
        if any(limited for _, limited in rows):
            await self._notify("due")  # a limit slot is free: another process may have a job waiting for it
        finished = {row[0] for row in rows}
        return [item[0] in finished for item in items]
