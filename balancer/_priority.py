"""PriorityLoadBalancer: every dispatch tries workers lowest uid first."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from ._protocol import LoadBalancerContextView, iter_ascending, known_full


class PriorityLoadBalancer:
    """Offer workers in ascending uid order on every dispatch: a leaky bucket.

    Because every dispatch starts from the same end, load piles onto the
    lowest-uid workers until their backpressure says no, and only the
    surplus spills over to higher uids. Workers at the top of the order see
    no work in quiet times, go idle, and can exit by themselves; under a
    burst they fill again. Pair it with a per-worker cap such as
    ``backpressure.TaskCountBackpressure``, or the lowest worker takes all.

    Order: ascending ``uuid.UUID.int`` of the worker uid, which is also the
    order of the canonical string form (``str(uid)``). It is arbitrary but
    stable: a worker keeps its place for its whole life. leakypool's own
    workers use time-ordered uids, so the oldest worker comes first.

    Contract, per dispatch: each worker present when the dispatch starts is
    offered at most once, in order; a worker that has left the pool by the
    time its turn comes is skipped, and so is one the context knows is full
    (``context.known_full``, when the pool offers it: no round trip to a
    worker that would say no); a reported failure moves on to the next
    worker; a reported success ends the generator, as does running out of
    workers (the pool then raises ``NoWorkersAvailable``).

    Stateless by construction: no attributes at all (``__slots__ = ()``),
    no per-pool index, no lock. All instances are equal and
    interchangeable, and it pickles by reference to the class.
    """

    __slots__ = ()

    async def delegate(
        self, task: Any, *, context: LoadBalancerContextView
    ) -> AsyncGenerator[uuid.UUID, uuid.UUID | None]:
        """Yield the context's worker uids in ascending order.

        Args:
            task: The task being routed; ignored (priority is task-agnostic).
            context: Read-only view of the pool.

        Yields:
            Worker uids, lowest first, until one accepts or none are left.
        """
        workers = context.workers
        full = known_full(context)
        for uid in iter_ascending(context):
            if uid not in workers or uid in full:
                continue
            try:
                accepted = yield uid
            except Exception:  # noqa: BLE001, S112 - a worker's rejection or fault thrown in by the pool: offer the next one
                continue  # rejected or broken; eviction is the pool's business
            if accepted is not None:
                return

    def order(self, task: Any, *, context: LoadBalancerContextView) -> Iterator[uuid.UUID]:
        """The workers `delegate` would offer, in the same order, without a generator to drive (`OrderedBalancer`).

        A lazy iterator of C code (itertools over the pool's ascending snapshot):
        a dispatch that the first worker takes costs no per-worker work.

        Args:
            task: The task being routed; ignored.
            context: Read-only view of the pool.

        Returns:
            Worker uids, lowest first, skipping the known full.
        """
        ordered = getattr(context, "ascending_uids", None)
        if ordered is None:
            workers = context.workers
            ordered = (uid for uid in iter_ascending(context) if uid in workers)
        full = getattr(context, "known_full", None)
        return itertools.filterfalse(full.__contains__, ordered) if full else iter(ordered)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return "PriorityLoadBalancer()"
