"""RoundRobinLoadBalancer: each dispatch starts one worker further along."""

from __future__ import annotations

import uuid
import weakref
from collections.abc import AsyncGenerator
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

    def first(self, task: Any, *, context: LoadBalancerContextView) -> uuid.UUID | None:
        """The worker `delegate` would offer first (None: none), without a generator; moves the cursor on as it does
        (for a pool that places without a round trip: it reports nothing back)."""
        workers = context.workers
        full = known_full(context)
        order = snapshot_ascending(context)
        if not order:
            return None
        start = self._advance(context, len(order))
        for offset in range(len(order)):
            uid = order[(start + offset) % len(order)]
            if uid in workers and uid not in full:
                return uid
        return None

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
