"""Group commit for a networked store: writes that arrive while one is in flight share the next one.

A store round trip (and its commit) costs the same for one row as for a
hundred. `Batcher` sends a write at once when the line is free; writes
that arrive meanwhile queue and leave together as one statement when a
flight lands. Nothing waits on a timer, so a lone write (a sequential
caller) is as fast as before, and a burst costs a handful of round trips.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar

from ..._base import TaskOwner
from ..._errors import StoreError

T = TypeVar("T")
R = TypeVar("R")

MAX_BATCH: Final[int] = 512
"""Writes sent in one statement at most."""

MAX_FLIGHTS: Final[int] = 2
"""Statements of one kind in flight at once (the next batch forms during them)."""


class Batcher(Generic[T, R]):
    """Coalesces concurrent writes of one kind into batched statements.

    Args:
        name: Names the flights (task names, errors).
        flush: Writes a batch; returns one result per item, in order.
            Raising fails every item of the batch with that exception.
        tasks: Owns the flights (the store's: its close ends them).
    """

    def __init__(
        self,
        name: str,
        flush: Callable[[list[T]], Awaitable[list[R]]],
        tasks: TaskOwner,
        *,
        max_batch: int = MAX_BATCH,
        max_flights: int = MAX_FLIGHTS,
    ) -> None:
        self._name = name
        self._flush = flush
        self._tasks = tasks
        self._max_batch = max_batch
        self._max_flights = max_flights
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._flights = 0

    def __call__(self, item: T) -> asyncio.Future[R]:
        """Write ``item`` in the next batch: a future of its result (await it).

        A future, not a coroutine: a writer waiting for its batch holds one
        object less (a burst's writers wait together). A caller cancelled
        while it awaits it cancels it (nobody reads its result then), and
        that does not take the write back (it may be in flight already), as
        with any single write.
        """
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, future))
        if self._flights < self._max_flights:
            self._flights += 1
            landed = [False]
            flight = self._tasks.spawn(self._fly(landed), name=f"{self._name} flight")
            flight.add_done_callback(lambda _: self._land(landed))  # also if cancelled before it started
        return future

    async def _fly(self, landed: list[bool]) -> None:
        batch: list[tuple[T, asyncio.Future[R]]] = []
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                try:
                    results = await self._flush([item for item, _ in batch])
                except Exception as exc:  # noqa: BLE001 - the batch's fault is handed to every waiting submitter
                    _settle(batch, error=exc)
                else:
                    for (_, future), result in zip(batch, results, strict=True):
                        if not future.done():
                            future.set_result(result)
                batch = []
        finally:
            _settle(batch, error=self._closed())  # cancelled mid-flight (the store closes)
            self._land(landed)

    def _land(self, landed: list[bool]) -> None:
        """A flight is over (once per flight); the last one fails what is still queued (the store closed)."""
        if landed[0]:
            return
        landed[0] = True
        self._flights -= 1
        if not self._flights and self._queue:
            _settle(self._queue, error=self._closed())
            self._queue = []

    def _closed(self) -> StoreError:
        return StoreError(f"{self._name}: the store closed before this write was confirmed")


def _settle(batch: list[tuple[T, asyncio.Future[R]]], *, error: BaseException) -> None:
    for _, future in batch:
        if not future.done():
            future.set_exception(error)
