"""The roster: who is in the pool, as the read-only view balancers get (`Membership` keeps it)."""

from __future__ import annotations

import operator
import types
import uuid
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet

from .._call import CallRecord, WorkerConnection
from .._transport import QUEUED, OutgoingCall, WorkerMetadata
from ._room import RoomBook

_UID_INT = operator.attrgetter("int")


class Roster:
    """Who is in the pool: uid -> (metadata, connection), kept in ascending uid order.

    Satisfies ``balancer.LoadBalancerContextView``: ``workers`` is a live,
    read-only mapping, and ``ascending_uids`` an immutable snapshot of the
    uids in ascending order, rebuilt only when membership changes, so an
    order-based balancer does not sort on every dispatch. ``known_full``
    names the workers that turned this pool away and have not announced
    room since (`RoomBook`): balancers skip them without a round trip.
    """

    def __init__(self) -> None:
        self._workers: dict[uuid.UUID, tuple[WorkerMetadata, WorkerConnection]] = {}
        self._view = types.MappingProxyType(self._workers)
        self.ascending_uids: tuple[uuid.UUID, ...] = ()
        self.known_full: AbstractSet[uuid.UUID] = frozenset()
        """The workers known to have no room for this pool now (an immutable snapshot, the `RoomBook`'s)."""
        self.room = RoomBook(self._full)

    def _full(self, full: frozenset[uuid.UUID]) -> None:
        self.known_full = full

    @property
    def workers(self) -> Mapping[uuid.UUID, tuple[WorkerMetadata, WorkerConnection]]:
        """Live read-only view: uid -> (metadata, connection)."""
        return self._view

    def get(self, uid: uuid.UUID) -> WorkerConnection | None:
        """The connection of worker ``uid``, if it is a member."""
        entry = self._workers.get(uid)
        return None if entry is None else entry[1]

    def add(self, connection: WorkerConnection) -> None:
        """Admit (or refresh) a worker."""
        uid = connection.metadata.uid
        known = uid in self._workers
        self._workers[uid] = (connection.metadata, connection)
        if not known:
            self._reorder()

    def refresh(self, metadata: WorkerMetadata) -> None:
        """Replace a member's record (same uid, same address): its connection stays."""
        entry = self._workers.get(metadata.uid)
        if entry is not None:
            entry[1].metadata = metadata
            self._workers[metadata.uid] = (metadata, entry[1])

    def remove(self, uid: uuid.UUID) -> WorkerConnection | None:
        """Drop a worker; returns its connection (for the caller to close)."""
        entry = self._workers.pop(uid, None)
        if entry is None:
            return None
        self.room.forget(uid)
        self._reorder()
        return entry[1]

    def connections(self) -> Iterator[WorkerConnection]:
        """Every member's connection, in uid order."""
        for uid in self.ascending_uids:
            yield self._workers[uid][1]

    def __len__(self) -> int:
        return len(self._workers)

    def __contains__(self, uid: object) -> bool:
        return uid in self._workers

    def _reorder(self) -> None:
        self.ascending_uids = tuple(sorted(self._workers, key=_UID_INT))


class PlainSlots:
    """This pool's plain calls on each worker, and the views of the roster a plain call's balancer gets.

    A worker runs one plain call at a time and holds up to ``depth`` more
    accepted behind it (`pool._worker._plain`). A plain call is offered in two
    passes of the balancer, both without a round trip: first to the workers
    running none of this pool's plain calls (``view(1)``), then to those with a
    place left in line (``view(1 + depth)``), each in the balancer's order, so
    the lowest-uid workers still fill first and no call waits inside a worker
    while another worker is idle. Other pools' plain calls still cost one
    rejection, as any stale hint does.
    """

    def __init__(self, roster: Roster, depth: int) -> None:
        self.depth = depth
        self._roster = roster
        self.calls: dict[uuid.UUID, list[OutgoingCall]] = {}  # ours on each worker, in the order sent
        self.refusing: set[uuid.UUID] = set()  # turned a plain call of ours away since our last call there ended
        self._views: dict[int, _SlotView] = {}
        self.version = 0  # bumped on every change (views cache their known_full by it)
        self._holders = 0  # bumped when a worker starts or stops holding calls of ours (a key of `calls` comes or goes)
        self._none_idle: tuple[tuple[uuid.UUID, ...], int, bool] | None = None  # (members, _holders, answer)

    def rooms(self, task: CallRecord) -> tuple[int, ...]:
        """The passes for ``task``: places per worker it may take (1: idle workers only)."""
        depth = self.depth if task.prefetch is None else min(self.depth, task.prefetch)
        return (1, 1 + depth) if depth else (1,)

    def view(self, room: int) -> _SlotView:
        """The roster with the workers holding ``room`` or more of this pool's plain calls counted full."""
        view = self._views.get(room)
        if view is None:
            view = self._views[room] = _SlotView(self._roster, self, room)
        return view

    def count(self, uid: uuid.UUID) -> int:
        """This pool's plain calls on worker ``uid`` now."""
        return len(self.calls.get(uid, ()))

    def taken(self, uid: uuid.UUID, call: OutgoingCall) -> None:
        """A plain call of this pool went to worker ``uid``."""
        calls = self.calls.get(uid)
        if calls is None:
            calls = self.calls[uid] = []
            self._holders += 1
        calls.append(call)
        self.version += 1

    def refuse(self, uid: uuid.UUID | None) -> None:
        """Worker ``uid`` turned a plain call away: pass it over until one of ours ends there (None: forget all)."""
        if uid is None:
            self.refusing.clear()
        else:
            self.refusing.add(uid)
        self.version += 1

    def freed(self, uid: uuid.UUID, call: OutgoingCall) -> None:
        """That plain call ended (or was handed back, turned away, given up)."""
        if call.state:
            self.refusing.discard(uid)  # one it had accepted ended: it may take another

        calls = self.calls.get(uid)
        if calls is not None and call in calls:
            calls.remove(call)
            if not calls:
                del self.calls[uid]
                self._holders += 1
            self.version += 1

    def none_idle(self) -> bool:
        """Whether every member runs one of this pool's plain calls (the common case under load).

        Counted over members: a worker that left keeps its calls here until
        they end, and its replacement is idle meanwhile.
        """
        members, cached = self._roster.ascending_uids, self._none_idle  # (a new tuple on every change of members)
        if cached is not None and cached[0] is members and cached[1] == self._holders:
            return cached[2]  # (under load: no worker started or stopped holding ours since the last ask)
        calls = self.calls
        answer = len(calls) >= len(members) and all(uid in calls for uid in members)
        self._none_idle = (members, self._holders, answer)
        return answer

    def idle(self) -> list[uuid.UUID]:
        """Workers running none of this pool's plain calls that may take one (not refusing, not known full)."""
        if self.none_idle():
            return []
        full = self._roster.room.known_full
        return [
            uid
            for uid in self._roster.workers
            if uid not in self.calls and uid not in self.refusing and uid not in full
        ]

    def queued_elsewhere(self, uid: uuid.UUID) -> OutgoingCall | None:
        """The longest-waiting call of this pool queued in another worker's line (not yet asked back), if any."""
        for other, calls in self.calls.items():
            if other != uid:
                for call in calls:
                    if call.state == QUEUED and not call.recalled:
                        return call
        return None


class _SlotView:
    """`Roster` as a balancer sees it for one pass of a plain call (see `PlainSlots`)."""

    def __init__(self, roster: Roster, slots: PlainSlots, room: int) -> None:
        self._roster = roster
        self._slots = slots
        self._room = room
        self._full: tuple[AbstractSet[uuid.UUID], int, AbstractSet[uuid.UUID]] | None = None

    @property
    def workers(self) -> Mapping[uuid.UUID, tuple[WorkerMetadata, WorkerConnection]]:
        """As `Roster.workers`."""
        return self._roster.workers

    @property
    def ascending_uids(self) -> tuple[uuid.UUID, ...]:
        """As `Roster.ascending_uids`."""
        return self._roster.ascending_uids

    @property
    def known_full(self) -> AbstractSet[uuid.UUID]:
        """The roster's known-full workers and those holding this pass's room of our plain calls (a snapshot)."""
        full, slots = self._roster.known_full, self._slots
        cached = self._full
        if cached is not None and cached[0] is full and cached[1] == slots.version:
            return cached[2]
        taken = {uid for uid, calls in slots.calls.items() if len(calls) >= self._room} | slots.refusing
        union = full | taken if taken else full
        self._full = (full, slots.version, union)
        return union
