"""The load-balancer protocol: what a balancer sees of a pool, what it must do, and helpers to order workers."""

from __future__ import annotations

import operator
import uuid
from collections.abc import AsyncGenerator, Container, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable


class NoWorkersAvailable(Exception):
    """No worker accepted the dispatch.

    Either the pool was empty, or every worker offered was busy
    (backpressure), draining, or broken. A retry can succeed once a worker
    frees up or joins; a pool with an admission queue retries for you.
    """

    def __init__(self, message: str = "no worker accepted the dispatch") -> None:
        super().__init__(message)


@runtime_checkable
class LoadBalancerContextView(Protocol):
    """What a balancer sees of a pool: its members, read-only.

    ``workers`` maps each worker's uid (a ``uuid.UUID``, stable for the
    life of the worker) to ``(metadata, connection)``. It is a live view:
    a worker that leaves the pool disappears from it.

    A pool MAY also offer ``ascending_uids``: an immutable snapshot of the
    uids in ascending order, rebuilt when membership changes. Balancers
    that order by uid use it to avoid sorting on every dispatch; a pool
    that lacks it (``wool``'s does) still works, only slower at scale.

    A pool MAY also offer ``known_full``: a set-like snapshot of the uids
    that turned this pool away for lack of room and have not announced room
    since. Balancers skip them without a round trip; the worker stays the
    authority (a stale hint costs one rejection, never a lost call). A pool
    without it (wool's) gets every worker offered, as before.
    """

    @property
    def workers(self) -> Mapping[uuid.UUID, tuple[Any, Any]]:
        """The pool's workers, by uid. MUST NOT be mutated by a balancer."""
        ...


@runtime_checkable
class LoadBalancerLike(Protocol):
    """Routing policy: yields worker uids, in preference order, for a task.

    The pool drives the generator ``delegate`` returns:

    - ``anext()`` asks for a candidate.
    - ``athrow(exc)`` reports that the last candidate failed. The pool has
      already evicted it if the failure was hard, so the balancer sees the
      new membership before it picks again. The generator MUST either
      yield the next candidate or finish.
    - ``asend(uid)`` reports that the last candidate accepted the task.
      The generator MUST then finish (yielding again is a protocol error).
    - ``asend(None)`` (or ``anext()`` again) means the candidate had left
      the pool before it could be tried: not a failure; offer the next.

    The generator finishing without a success means no worker took the
    task; the pool then raises `NoWorkersAvailable` (or queues the task,
    if it has an admission queue). A balancer MUST NOT catch
    ``BaseException``: cancellation and ``GeneratorExit`` must pass.
    """

    def delegate(self, task: Any, *, context: LoadBalancerContextView) -> AsyncGenerator[uuid.UUID, uuid.UUID | None]:
        """Yield candidate uids for ``task`` from ``context.workers``."""
        ...


@runtime_checkable
class OrderedBalancer(Protocol):
    """A balancer that can also say its order without a generator to drive: what a pool MAY use instead of
    `LoadBalancerLike.delegate`.

    ``order(task, context=...)`` MUST yield the candidates ``delegate`` would
    yield for the same task and context, in the same order, each once,
    skipping the workers the context knows are full, and MUST have the same
    effect on the balancer's own state (a round-robin cursor moves on once
    per dispatch). It is iterated lazily: the pool offers the task to each
    candidate in turn (skipping one that left the pool meanwhile) and stops
    at the first that accepts; it reports nothing back. A pool that finds
    this method calls it instead of ``delegate``, which spares an async
    generator and its drive per dispatch; ``delegate`` stays the contract
    every pool (wool's) drives, and the one a balancer without ``order`` is
    driven by. Both built-in balancers offer it.
    """

    def order(self, task: Any, *, context: LoadBalancerContextView) -> Iterable[uuid.UUID]:
        """The candidate uids for ``task``, in preference order (see the class)."""
        ...


def iter_ascending(context: LoadBalancerContextView) -> Iterator[uuid.UUID]:
    """The context's uids in ascending order, as of now, produced lazily.

    Uses the pool's ``ascending_uids`` when it offers one. Otherwise it
    snapshots the members, finds the lowest in O(n) and sorts the rest
    only if the dispatch gets that far: a dispatch that the first worker
    accepts never pays for the sort.
    """
    ordered = getattr(context, "ascending_uids", None)
    if ordered is not None:
        yield from ordered
        return
    snapshot = list(context.workers)
    if not snapshot:
        return
    lowest = min(snapshot, key=_UID_INT)
    yield lowest
    snapshot.remove(lowest)
    yield from sorted(snapshot, key=_UID_INT)


def known_full(context: LoadBalancerContextView) -> Container[uuid.UUID]:
    """The workers the context says are full (``context.known_full``), or none when it does not say."""
    full = getattr(context, "known_full", None)
    return full if full else ()


def snapshot_ascending(context: LoadBalancerContextView) -> Sequence[uuid.UUID]:
    """The context's uids in ascending ``uuid.UUID.int`` order, as a snapshot.

    Uses the pool's ``ascending_uids`` when it offers one (O(1)); otherwise
    sorts (O(n log n)).
    """
    ordered: Sequence[uuid.UUID] | None = getattr(context, "ascending_uids", None)
    if ordered is not None:
        return ordered
    return sorted(context.workers, key=_UID_INT)


_UID_INT = operator.attrgetter("int")
