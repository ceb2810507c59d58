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
A plain call goes through the balancer in two passes (`PlainSlots`): to
the workers running none of this pool's plain calls, then to those with a
place left in their line of ``plain_prefetch``; a worker left with none of
ours asks another for a call still waiting in its line (`OutgoingCall.hand_back`).
Anything that is not a
`WorkerRejected` or `WorkerBroken` (a bug, a cancellation) propagates and
changes no membership.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Final

from balancer import LoadBalancerLike

from .._base._exit import DRAINING_MESSAGE
from .._call._connection import WorkerConnection
from .._call._task import Task
from .._errors import NoWorkersAvailable, WorkerBroken, WorkerRejected
from .._transport._outgoing import QUEUED, OutgoingCall
from ._membership import Membership
from ._roster import PlainSlots, Roster
from ._sends import pick

OVERDUE_GRACE_S: Final[float] = 0.25
"""After a plain call's deadline, how long its worker gets to exit by itself before the pool kills it (a worker
that can run its own deadline answers within a switch interval; one stuck in C code holding the GIL cannot)."""


class Placement:
    """The balancer loop of one pool.

    Args:
        balancer: Orders the candidates.
        roster: Who is in the pool (the balancer's read-only context).
        membership: Keeps the roster; told of reachability and evictions.
        close: Closes the connections of evicted workers.
        plain_prefetch: Plain calls of ours a busy worker may hold behind its running one.
    """

    def __init__(
        self,
        balancer: LoadBalancerLike,
        roster: Roster,
        membership: Membership,
        close: Callable[[Iterable[WorkerConnection]], None],
        plain_prefetch: int = 0,
    ) -> None:
        self.balancer = balancer
        self._roster = roster
        self._membership = membership
        self._close = close
        self._room = roster.room
        self._plain = PlainSlots(roster, plain_prefetch)
        self.waiting: Callable[[], bool] = lambda: False  # calls wait for a worker (an idle one is fed, not stolen for)
        self.dispatched = 0
        self.overdue: Callable[[uuid.UUID], object] | None = None  # a worker past a plain call's hard timeout
        self.draining: set[uuid.UUID] = set()  # workers that turned a call away as draining (pruned by the pool)

    def place(self, task: Task) -> Coroutine[None, None, OutgoingCall]:
        """Get ``task`` accepted by one worker, trying them in the balancer's order (await it).

        Raises:
            NoWorkersAvailable: none accepted it (the last refusal is its cause).
        """
        return self._place_plain(task) if task.plain else self._offer(task, self._roster)  # (no coroutine between)

    async def _place_plain(self, task: Task) -> OutgoingCall:
        last: NoWorkersAvailable | None = None
        for room in self._plain.rooms(task):  # idle workers first, then places in line, each in balancer order
            try:
                return await self._offer(task, self._plain.view(room), plain=True)
            except NoWorkersAvailable as exc:
                last = exc
        assert last is not None  # noqa: S101 - an invariant: rooms() is never empty
        raise last

    async def _offer(self, task: Task, context: object, *, plain: bool = False) -> OutgoingCall:
        """One pass of the balancer over ``context``: the first worker that accepts ``task``."""
        delegation = self.balancer.delegate(task, context=context)  # type: ignore[arg-type]  # a roster view
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
                    self._plain.taken(uid, call)
                    call.on_finish(functools.partial(self._plain_ended, uid, task))
                    if call.state == QUEUED:
                        self.queued(uid)
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

    def send_plain(self, task: Task) -> tuple[uuid.UUID, int, OutgoingCall] | None:
        """Send plain ``task`` to the first worker with a place for it, without waiting for its answer; None: none has.

        The same two passes as `place`, with the balancer driven without
        awaiting (its ``asend(uid)`` comes as the call leaves: a worker that
        then turns it away costs it a place back in the queue, see
        `Admission`). Returns (worker, room epoch, call).

        Raises:
            Suspended: the balancer awaits something (use `place`).
        """
        for room in self._plain.rooms(task):
            if room == 1 and self._plain.none_idle():
                continue  # the idle pass could offer no one: every worker runs one of ours (no balancer call)
            uid = pick(self.balancer, task, self._plain.view(room), self._roster.get)
            if uid is not None:
                connection = self._roster.get(uid)
                assert connection is not None  # noqa: S101 - `pick` returns only members
                epoch = self._room.offer(uid)
                call = connection.send(task)
                self.dispatched += 1
                self._plain.taken(uid, call)
                call.on_finish(functools.partial(self._plain_ended, uid, task))
                return uid, epoch, call
        return None

    def refused(self, uid: uuid.UUID, exc: WorkerRejected | WorkerBroken, epoch: int) -> None:
        """A call `send_plain` sent was turned away (or its stream failed first): as `place` would have seen it."""
        connection = self._roster.get(uid)
        if connection is not None:
            self._refused(uid, connection, exc, epoch)
        if not (isinstance(exc, WorkerRejected) and exc.full):
            self._plain.refuse(uid)  # passed over by plain calls until one of ours ends there, or the backstop

    def _plain_ended(self, uid: uuid.UUID, task: Task, call: OutgoingCall) -> None:
        """A plain call left worker ``uid``; one its caller gave up at its deadline may leave the worker stuck.

        The worker enforces the deadline itself (it answers `TimeoutError` and
        exits), unless its function holds the GIL in C code and nothing else
        in it can run: after `OVERDUE_GRACE_S`, a worker still in the pool is
        handed to ``overdue`` (the pool kills and replaces its own workers).
        """
        self._plain.freed(uid, call)
        if not self._plain.count(uid) and not self.waiting():
            stolen = self._plain.queued_elsewhere(uid)  # an idle worker: no call waits behind another meanwhile
            if stolen is not None:
                stolen.hand_back()
        deadline = task.deadline
        if self.overdue is None or not call.cancelled_here or deadline is None or time.monotonic() < deadline:
            return
        asyncio.get_running_loop().call_later(OVERDUE_GRACE_S, self._still_there, uid)

    def _still_there(self, uid: uuid.UUID) -> None:
        if uid in self._roster and self.overdue is not None:
            self.overdue(uid)

    def may_take(self, task: Task) -> bool:
        """Whether some worker may take ``task`` now: False for a plain call while each line is full of ours (I/O-free)."""
        return not task.plain or len(self._plain.view(self._plain.rooms(task)[-1]).known_full) < len(self._roster)

    def queued(self, uid: uuid.UUID) -> None:
        """A plain call of ours was accepted queued on worker ``uid``: a worker that went idle meanwhile asks one back.

        The pool counts a call queued only once its Accept says so (which a
        worker sends late: `_worker._plain_calls.QUEUED_ACCEPT_S`), so a
        worker that went idle before it came found none to ask back. Only
        behind another call of ours: a call placed on a worker that runs none
        of ours queued behind someone else's, and asking it back for another
        such worker could go round and round.
        """
        if self._plain.count(uid) > 1:
            self.feed_idle()

    def feed_idle(self) -> None:
        """Ask a call still waiting in a busy worker's line back for each worker that runs none of ours (I/O-free).

        For a worker that joined (`Membership.joined`) while calls wait in
        other workers' lines: it would otherwise idle until one of them ends;
        and when a call's Accept says queued (`queued`).
        As when a call ends (`_plain_ended`): only while no call waits for a
        worker in the pool's queue (that one is fed to it instead). The
        worker decides: a call it started meanwhile just runs there.
        """
        if not self._plain.calls or self.waiting():
            return
        for uid in self._plain.idle():
            stolen = self._plain.queued_elsewhere(uid)
            if stolen is None:
                return
            stolen.hand_back()

    def doubt_refusals(self) -> None:
        """Offer plain calls again to the workers that turned one away (capacity may have changed)."""
        if self._plain.refusing:
            self._plain.refuse(None)

    def doubt(self) -> None:
        """Offer every worker again, known full or not (the admission queue's backstop, when nothing was heard)."""
        self.doubt_refusals()
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
