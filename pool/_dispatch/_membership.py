"""Keeping a pool's membership current: admit, refresh, evict, follow discovery.

Workers join from the pool's own fleet (on READY) and from a discovery
backend (as it announces them), and leave when their process exits, when
discovery withdraws them, when a hard error shows they are broken, or when
a discovered worker stays unreachable. A worker that leaves gracefully
keeps its connection until its calls in flight have ended.

`Membership` keeps the `Roster` (the read-only view balancers see) and
decides; closing a connection is I/O, so `evict` returns the connections
to close and the pool's ``close`` callback (which owns those tasks) does it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final

from .._call import WorkerConnection
from .._discovery import DiscoveryEvent, DiscoveryLike
from .._transport import CallHost, TlsCredentials, Trust, WorkerMetadata
from .._transport import leakypool_pb2 as pb
from ._roster import Roster
from ._route import Route, route

_log = logging.getLogger("leakypool.pool")

RESUBSCRIBE_S: Final[float] = 1.0
"""After a discovery backend fails, wait this long before subscribing again."""

UNREACHABLE_EVICT_S: Final[float] = 10.0
"""A discovered worker that cannot be reached for this long is set aside."""

SET_ASIDE_S: Final[float] = 10.0
"""How long an unreachable discovered worker sits out before it is tried again."""

PROVE_MOVE_S: Final[float] = 5.0
"""How long the worker at a record's new address gets to prove it is the worker that moved."""


class Membership:
    """The pool's members and the rules for who joins and leaves.

    Args:
        host: Serves the calls workers make back (nested dispatch).
        credentials: TLS client credentials: every worker off loopback is dialled with them.
        trust: What this pool proves itself with to workers, and whom it trusts.
        insecure: Dial workers off loopback without TLS when the pool has no credentials.
        tags: Discovered workers must carry all of these to join.
        changed: Called whenever membership changes or a worker has room.
        close: Closes connections of departed workers (the pool starts and
            owns that I/O).
        is_local: Whether a uid is one of the pool's own spawned workers.
        broken_local: Called with the uid of a spawned worker that failed
            hard, so its process is replaced rather than left running unused.
        spawn: Runs a coroutine the membership needs (proving a moved worker) in a task the pool owns.
        joined: Called with the uid of a worker just admitted (after ``changed``).
    """

    def __init__(
        self,
        host: CallHost,
        *,
        credentials: TlsCredentials | None,
        trust: Trust,
        insecure: bool = False,
        tags: Iterable[str],
        changed: Callable[[], None],
        close: Callable[[Iterable[WorkerConnection]], None],
        is_local: Callable[[uuid.UUID], bool],
        broken_local: Callable[[uuid.UUID], None],
        spawn: Callable[[Coroutine[Any, Any, None], str], object] | None = None,
        joined: Callable[[uuid.UUID], object] | None = None,
    ) -> None:
        self.roster = Roster()
        self._host = host
        self._credentials = credentials
        self._trust = trust
        self._own_trust = trust.own()  # spawned workers hold the pool's own key only: no secret file to read
        self._insecure = insecure
        self._spawn = spawn
        self._moving: dict[uuid.UUID, str] = {}  # uid -> the address a record moves it to, being proven
        self._tags = frozenset(tags)
        self._changed = changed
        self._close = close
        self._is_local = is_local
        self._broken_local = broken_local
        self._waiters: list[asyncio.Future[None]] = []
        self.unreachable_since: dict[uuid.UUID, float] = {}
        self._set_aside: dict[uuid.UUID, asyncio.TimerHandle] = {}
        self._retiring: set[WorkerConnection] = set()
        self._joined = joined

    def admit(self, metadata: WorkerMetadata) -> None:
        """Add a worker (a new connection to it), unless the pool will not dial it as its record asks (logged)."""
        connection = self._connect(metadata)
        if connection is not None:
            self.roster.add(connection)
            if metadata.local:
                connection.connect()  # the pool's own: it will be used; prove both ends while others start
            self._notify()
            if self._joined is not None:
                self._joined(metadata.uid)

    def _connect(self, metadata: WorkerMetadata) -> WorkerConnection | None:
        way = route(metadata, self._credentials, insecure=self._insecure)
        if not isinstance(way, Route):
            _log.warning("not admitting worker %s at %s: %s", metadata.uid, metadata.address, way)
            return None
        trust = self._own_trust if metadata.local else self._trust
        return WorkerConnection(metadata, self._host, trust, way.credentials, on_room=self._on_room)

    def evict(self, uid: uuid.UUID, why: str, *, graceful: bool = True) -> list[WorkerConnection]:
        """Drop a worker; returns the connections to close now.

        Graceful: its calls in flight finish first (its connection goes to
        ``close`` by itself once they have). Not graceful (it failed hard):
        its connection is returned to be closed at once, and a spawned
        worker is killed so the fleet replaces it instead of keeping an
        unused process.
        """
        connection = self.roster.remove(uid)
        if connection is None:
            return []
        _log.info("worker %s left the pool: %s", uid, why)
        self._retiring = {c for c in self._retiring if not c.closed}
        self._retiring.add(connection)
        self._notify()
        if graceful:
            connection.retire(lambda c: self._close([c]))
            return []
        if connection.metadata.local:
            self._broken_local(uid)
        return [connection]

    async def follow(self, discovery: DiscoveryLike) -> None:
        """Apply a backend's events for as long as the pool lives, resubscribing after a failure."""
        while True:
            try:
                async for event in discovery.subscribe():
                    self.apply(event)
            except Exception:  # noqa: BLE001 - a user discovery's fault is logged and it is resubscribed, never fatal to the pool
                _log.exception("discovery %r failed; resubscribing in %.1fs", discovery, RESUBSCRIBE_S)
            await asyncio.sleep(RESUBSCRIBE_S)

    def apply(self, event: DiscoveryEvent) -> None:
        """One discovery event: admit, refresh, move or drop the worker."""
        worker = event.worker
        aside = self._set_aside.pop(worker.uid, None)
        if aside is not None:
            aside.cancel()
        if event.kind == "dropped":
            self.unreachable_since.pop(worker.uid, None)
            self._close(self.evict(worker.uid, "withdrawn from discovery"))
            return
        if not self._tags <= worker.tags:
            self._close(self.evict(worker.uid, f"its tags {sorted(worker.tags)} no longer match"))
            return
        if self._is_local(worker.uid):
            return
        current = self.roster.get(worker.uid)
        if current is not None and (current.metadata.address, current.metadata.tls) == (worker.address, worker.tls):
            self.roster.refresh(worker)
            return
        if current is not None:
            self._move(current, worker)
            return
        _log.info("worker %s at %s joined the pool (discovered)", worker.uid, worker.address)
        self.admit(worker)

    def _move(self, current: WorkerConnection, worker: WorkerMetadata) -> None:
        """A record moves a member elsewhere: it moves once the worker there proved to be that worker.

        Until then the member stays where it is: a planted record that
        names a member's uid and another address cannot evict it (the
        handshake binds the worker's uid, so only the genuine worker proves it).
        """
        if self._moving.get(worker.uid) == worker.address or self._spawn is None:
            return
        candidate = self._connect(worker)
        if candidate is None:
            return
        self._moving[worker.uid] = worker.address
        self._spawn(self._prove_move(current, candidate), f"prove {worker.uid} moved")

    async def _prove_move(self, current: WorkerConnection, candidate: WorkerConnection) -> None:
        worker = candidate.metadata
        try:
            await candidate.state(PROVE_MOVE_S)
        except Exception as exc:  # noqa: BLE001 - whatever failed, the new address did not prove itself: nothing moves
            _log.warning(
                "a record moves worker %s to %s, but no worker there proved to be it (%s): it stays at %s",
                worker.uid,
                worker.address,
                exc,
                current.metadata.address,
            )
            await candidate.close()
            return
        finally:
            if self._moving.get(worker.uid) == worker.address:
                del self._moving[worker.uid]
        if self.roster.get(worker.uid) is not current:
            await candidate.close()  # it left (or moved) meanwhile
            return
        self._close(self.evict(worker.uid, f"moved to {worker.address} (proven)"))
        _log.info("worker %s at %s joined the pool (discovered)", worker.uid, worker.address)
        self.roster.add(candidate)
        self._notify()

    def reachable(self, uid: uuid.UUID) -> None:
        """A call reached worker ``uid``."""
        self.unreachable_since.pop(uid, None)

    def unreachable(self, worker: WorkerMetadata, exc: BaseException) -> None:
        """A discovered worker that stays unreachable is set aside for a while.

        Its host may be down: trying it first on every dispatch would cost
        each one a failed connection. It is tried again after `SET_ASIDE_S`
        (or as soon as discovery announces it anew), and leaves for good only
        when discovery withdraws it. Spawned workers are not set aside: the
        fleet sees their process exit.
        """
        if worker.local or worker.uid not in self.roster:
            self.unreachable_since.pop(worker.uid, None)  # (gone already, withdrawn say: nothing to bring back later)
            return
        now = time.monotonic()
        since = self.unreachable_since.setdefault(worker.uid, now)
        if now - since < UNREACHABLE_EVICT_S:
            return
        del self.unreachable_since[worker.uid]
        self._close(self.evict(worker.uid, f"unreachable for {now - since:.0f}s ({exc}); retrying in {SET_ASIDE_S:g}s"))
        loop = asyncio.get_running_loop()
        self._set_aside[worker.uid] = loop.call_later(SET_ASIDE_S, self._bring_back, worker)

    def _bring_back(self, worker: WorkerMetadata) -> None:
        if self._set_aside.pop(worker.uid, None) is not None and worker.uid not in self.roster:
            self.admit(worker)

    async def until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Wait until ``predicate()`` holds, re-checking on every membership change.

        Raises:
            TimeoutError: it did not within ``timeout`` seconds.
        """
        async with asyncio.timeout(timeout):
            while not predicate():
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                try:
                    await waiter
                finally:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    async def close(self) -> None:
        """Close every connection now, those of departed workers included."""
        for aside in self._set_aside.values():
            aside.cancel()
        self._set_aside.clear()
        connections = list(self._retiring)
        for uid in list(self.roster.ascending_uids):
            connection = self.roster.remove(uid)
            if connection is not None:
                connections.append(connection)
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)

    async def states(self, timeout: float) -> dict[uuid.UUID, pb.WorkerState]:
        """Each member's own report (its State call); those that do not answer within ``timeout`` are left out."""
        connections = list(self.roster.connections())
        answers = await asyncio.gather(*(c.state(timeout) for c in connections), return_exceptions=True)
        states = {
            c.metadata.uid: answer
            for c, answer in zip(connections, answers, strict=True)
            if not isinstance(answer, BaseException)
        }
        for uid, state in states.items():
            if state.capacity and state.in_flight < state.capacity:
                self.roster.room.announced(uid)  # room as of its answer: offer it again
        return states

    def _on_room(self, uid: uuid.UUID, room: pb.Room | None) -> None:
        self.roster.room.announced(uid)
        self._changed()

    def _notify(self) -> None:
        self._changed()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
