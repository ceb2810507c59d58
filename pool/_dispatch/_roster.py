"""The roster: who is in the pool, as the read-only view balancers get (`Membership` keeps it)."""

from __future__ import annotations

import operator
import types
import uuid
from collections.abc import Iterator, Mapping
from collections.abc import Set as AbstractSet

from .._call._connection import WorkerConnection
from .._transport._rpc import WorkerMetadata
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
        self.room = RoomBook()

    @property
    def known_full(self) -> AbstractSet[uuid.UUID]:
        """The workers known to have no room for this pool now (an immutable snapshot)."""
        return self.room.known_full

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


class PlainRoster:
    """The roster as a plain call's balancer sees it: workers running this pool's plain calls count as full.

    A worker runs one plain call at a time and turns the next away (see
    `pool._worker._plain`). This pool knows which of its plain calls run
    where, so it skips those workers without a round trip and offers the
    worker again the moment its plain call ends (no Room frame needed).
    Other pools' plain calls still cost one rejection, as any stale hint does.
    """

    def __init__(self, roster: Roster) -> None:
        self._roster = roster
        self._busy: dict[uuid.UUID, int] = {}
        self._full: tuple[AbstractSet[uuid.UUID], AbstractSet[uuid.UUID]] | None = None  # (roster's, union)

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
        """The roster's known-full workers and those running a plain call of this pool (a snapshot)."""
        full = self._roster.known_full
        cached = self._full
        if cached is not None and cached[0] is full:
            return cached[1]
        union = full | self._busy.keys() if self._busy else full
        self._full = (full, union)
        return union

    def taken(self, uid: uuid.UUID) -> None:
        """A plain call of this pool started on worker ``uid``."""
        self._busy[uid] = self._busy.get(uid, 0) + 1
        self._full = None

    def freed(self, uid: uuid.UUID) -> None:
        """That plain call ended (or was given up)."""
        left = self._busy.get(uid, 0) - 1
        if left > 0:
            self._busy[uid] = left
        else:
            self._busy.pop(uid, None)
        self._full = None
