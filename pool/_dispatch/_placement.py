"""Placement: offer one task to the workers in the balancer's order until one accepts.

    balancer.delegate(task, context=roster)
        │ anext()                                  a candidate uid
        v
    connection.dispatch(task) ── Accept ──> asend(uid): the generator must end ──> OutgoingCall
        │ WorkerRejected  (busy, draining, unreachable for now): keep the worker;
        │                 full (RESOURCE_EXHAUSTED at its capacity): known full until it says "room"
        │ WorkerBroken    (hard failure): evict it first, close its connection
        └──> athrow(exc) ──> the next candidate ... the generator ends: NoWorkersAvailable

The balancer selects; this module dispatches, reports back and evicts (the
balancer only ever sees the roster, read-only). Workers known full are in
the roster's ``known_full``, which balancers skip: once the first workers
are full, a call goes to the first with room without a round trip to each.
A plain call's balancer also skips the workers running this pool's plain
calls (`PlainRoster`): each runs one at a time. Anything that is not a
`WorkerRejected` or `WorkerBroken` (a bug, a cancellation) propagates and
changes no membership.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from balancer import LoadBalancerLike

from .._base._exit import DRAINING_MESSAGE
from .._errors import NoWorkersAvailable, WorkerBroken, WorkerRejected
from .._transport._connection import WorkerConnection
from .._transport._outgoing import OutgoingCall
from .._transport._task import Task
from ._membership import Membership
from ._roster import PlainRoster, Roster


class Placement:
    """The balancer loop of one pool.

    Args:
        balancer: Orders the candidates.
        roster: Who is in the pool (the balancer's read-only context).
        membership: Keeps the roster; told of reachability and evictions.
        close: Closes the connections of evicted workers.
    """

    def __init__(
        self,
        balancer: LoadBalancerLike,
        roster: Roster,
        membership: Membership,
        close: Callable[[Iterable[WorkerConnection]], None],
    ) -> None:
        self.balancer = balancer
        self._roster = roster
        self._membership = membership
        self._close = close
        self._room = roster.room
        self._plain = PlainRoster(roster)
        self.dispatched = 0
        self.draining: set[uuid.UUID] = set()  # workers that turned a call away as draining (pruned by the pool)

    async def place(self, task: Task) -> OutgoingCall:
        """Get ``task`` accepted by one worker, trying them in the balancer's order.

        Raises:
            NoWorkersAvailable: none accepted it (the last refusal is its cause).
        """
        plain = task.plain
        delegation = self.balancer.delegate(task, context=self._plain if plain else self._roster)
        last: BaseException | None = None
        try:
            uid = await anext(delegation)
            while True:
                connection = self._roster.get(uid)
                if connection is None:  # left the pool since the balancer looked
                    uid = await delegation.asend(None)
                    continue
                epoch = self._room.offer(uid)
                try:
                    call = await connection.dispatch(task)
                except (WorkerRejected, WorkerBroken) as exc:
                    last = exc
                    self._refused(uid, connection, exc, epoch)
                    uid = await delegation.athrow(exc)
                    continue
                self._membership.reachable(uid)
                self.dispatched += 1
                if plain:
                    self._plain.taken(uid)
                    call.on_finish(lambda _, uid=uid: self._plain.freed(uid))
                try:
                    await delegation.asend(uid)
                except StopAsyncIteration:
                    return call
                call.cancel()
                raise RuntimeError(f"{self.balancer!r} offered another worker after a success")
        except StopAsyncIteration:
            pass
        finally:
            await delegation.aclose()
        if not self._roster:
            raise NoWorkersAvailable(f"no worker to run {task.name}(): the pool is empty") from last
        if last is None and self._room.known_full:
            raise NoWorkersAvailable(
                f"no worker has room for {task.name}(): {len(self._room)} of {len(self._roster)} "
                "turned this pool away and have not announced room since"
            )
        raise NoWorkersAvailable(f"no worker accepted {task.name}(): {len(self._roster)} busy or unavailable") from last

    def doubt(self) -> None:
        """Offer every worker again, known full or not (the admission queue's backstop, when nothing was heard)."""
        for uid in list(self._room.known_full):
            self._room.announced(uid)

    def _refused(
        self, uid: uuid.UUID, connection: WorkerConnection, exc: WorkerRejected | WorkerBroken, epoch: int
    ) -> None:
        if isinstance(exc, WorkerRejected) and f": {DRAINING_MESSAGE}" in str(exc):
            self.draining.add(uid)
        if isinstance(exc, WorkerBroken):
            self._close(self._membership.evict(uid, str(exc), graceful=False))
        elif connection.broken:
            self._membership.unreachable(connection.metadata, exc)
        elif exc.full:
            self._room.rejected(uid, epoch)  # full by its count: it remembers us and owes us a Room
