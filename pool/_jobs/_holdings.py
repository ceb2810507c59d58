"""The jobs one dispatching process holds, from adoption (a lease, its own submit) to their end.

    adopt ──> waiting (due order) ──> placing ──> running ──> end (its waiters here are told)
                  ^                      │
                  └──── put back ────────┘  (no worker, a full limit; not if cancelled meanwhile)

One object, shared by the scheduler (which leases and decides when to place)
and its `Attendant` (which sees each placement through), so neither reaches
into the other's attributes. The store, not this, is the source of truth:
what the store has this process hold beyond `ids` is given back at each tick
(`_stores._strays`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

from ._attempt import Attempt, due_order
from ._store import JobRecord


class Holdings:
    """What one scheduler holds (see the module).

    Args:
        finished: Tells this process's waiters a held job ended here (its final record, or None: read the store).

    Attributes:
        waiting: Leased, waiting for a worker or a limit slot, in due order.
        placing: Being offered to workers now.
        running: Accepted by a worker, by job id.
        cancelled: Ids cancelled while a placement of theirs was under way (it must not put them back).
        ids: Every job id held, from adoption to its end.
        backlog: The store may hold due jobs this process has not leased (lease on the next pass).
        gave_back: Jobs went back to the store for want of a worker (lease again at the next capacity event).
    """

    def __init__(self, finished: Callable[[str, JobRecord | None], None]) -> None:
        self._finished = finished
        self.waiting: list[Attempt] = []
        self.placing: set[Attempt] = set()
        self.running: dict[str, Attempt] = {}
        self.cancelled: set[str] = set()
        self.ids: set[str] = set()
        self.backlog = True  # nothing known yet: look
        self.gave_back = False

    def adopt(self, attempt: Attempt) -> None:
        """Hold ``attempt``'s job: it waits, in due order."""
        bisect.insort(self.waiting, attempt, key=due_order)
        self.ids.add(attempt.job.id)

    def put_back(self, attempt: Attempt) -> None:
        """``attempt`` waits again, in due order (unless it was cancelled meanwhile: then it is dropped)."""
        attempt.runner = None
        if attempt.job.id in self.cancelled:
            self.cancelled.discard(attempt.job.id)
            self.drop(attempt.job.id)
            return
        bisect.insort(self.waiting, attempt, key=due_order)

    def drop(self, job_id: str) -> None:
        """Hold ``job_id`` no more (its waiters here read the store from now on)."""
        self.end(job_id, None)

    def end(self, job_id: str, final: JobRecord | None) -> None:
        """``job_id``'s attempt here ended (``final``: its final record, if it is final)."""
        self.running.pop(job_id, None)
        self.ids.discard(job_id)
        self._finished(job_id, final)

    def __repr__(self) -> str:
        return f"<Holdings [{len(self.waiting)} waiting, {len(self.placing)} placing, {len(self.running)} running]>"
