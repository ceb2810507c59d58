"""RoundRobinLoadBalancer: each dispatch starts one worker further along."""

from __future__ import annotations

import itertools
import uuid
import weakref
from collections.abc import AsyncGenerator, Iterator
from typing import Any

from ._protocol import LoadBalancerContextView, known_full, snapshot_ascending


class RoundRobinLoadBalancer:
    """Spread dispatches evenly: each one starts at the next worker in turn.

    The pool's default. Over time every worker gets an equal share, which
    keeps all of them warm (the opposite of `PriorityLoadBalancer`). One
    dispatch offers each worker at most once, starting at this context's
    cursor, and ends after a full turn without a success. Workers the
    context knows are full (``context.known_full``) are passed over.

    The cursor is kept per context in a ``WeakKeyDictionary``, so one
    balancer can serve several pools and a closed pool's cursor goes with
    it. Pickling drops the cursors: a copy starts afresh.
    """

    def __init__(self) -> None:
        # context -> [next start]: a list, moved on in place (one weak-dict lookup per dispatch, no store)
        self._cursors: weakref.WeakKeyDictionary[Any, list[int]] = weakref.WeakKeyDictionary()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (type(self), ())

    async def delegate(
        self, task: Any, *, context: LoadBalancerContextView
    ) -> AsyncGenerator[uuid.UUID, uuid.UUID | None]:
        """Yield each worker once, starting at this context's cursor.

        Args:
            task: The task being routed; ignored.
            context: Read-only view of the pool.

        Yields:
            Worker uids until one accepts or all were offered.
        """
        workers = context.workers
        full = known_full(context)
        order = snapshot_ascending(context)
        if not order:
            return
        start = self._advance(context, len(order))  # before yielding, so concurrent dispatches start apart
        for offset in range(len(order)):
            uid = order[(start + offset) % len(order)]
            if uid not in workers or uid in full:
                continue
            try:
                accepted = yield uid
            except Exception:  # noqa: BLE001, S112 - a worker's rejection or fault thrown in by the pool: offer the next one
                continue
            if accepted is not None:
                return

    def order(self, task: Any, *, context: LoadBalancerContextView) -> Iterator[uuid.UUID]:
        """The workers `delegate` would offer, in the same order, without a generator to drive (`OrderedBalancer`);
        the cursor moves on as it does, once per dispatch.

        A lazy iterator of C code (itertools over the pool's ascending snapshot).

        Args:
            task: The task being routed; ignored.
            context: Read-only view of the pool.

        Returns:
            Worker uids, one turn from this context's cursor, skipping the known full.
        """
        order = getattr(context, "ascending_uids", None)
        if order is None:
            order = snapshot_ascending(context)
        size = len(order)
        if not size:
            return iter(())
        cursor = self._cursors.get(context)
        if cursor is None:
            cursor = self._cursors[context] = [0]
        start = cursor[0] % size
        cursor[0] = start + 1
        turn = itertools.chain(itertools.islice(order, start, None), itertools.islice(order, start))
        full = getattr(context, "known_full", None)
        return itertools.filterfalse(full.__contains__, turn) if full else turn

    def _advance(self, context: Any, size: int) -> int:
        """This context's cursor (mod ``size``), moved one on."""
        cursor = self._cursors.get(context)
        if cursor is None:
            cursor = self._cursors[context] = [0]
        start = cursor[0] % size
        cursor[0] = start + 1
        return start

    def __repr__(self) -> str:
        return "RoundRobinLoadBalancer()"
