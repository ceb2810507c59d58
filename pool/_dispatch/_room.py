"""What this pool knows of its workers' room: who turned it away and has not said "room" since. No I/O.

    offer(uid) ──> epoch          taken before a call goes out to worker uid
    Reject(RESOURCE_EXHAUSTED, in_flight >= capacity) ──> rejected(uid, epoch)
                                   known full, unless room was announced meanwhile
    Room frame, State with room ──> announced(uid)         not full; the epoch moves on
    worker leaves ──> forget(uid)

Balancers read `known_full` (``context.known_full``) and skip those workers
without a round trip. Only a rejection at the worker's advertised capacity
marks it: such a worker refuses every call until one of its tasks ends
(a hook that refuses some tasks, or refuses for memory with room in its
count, is offered each call as before). The worker stays the authority: it
remembers every stream it turned away and sends that stream a Room frame
when room frees (a call ends or parks on a nested call), so a worker marked
full here is always owed a Room. A hint can only be stale on
the safe side: a Room that arrived while the rejected call's answer was on
its way moved the epoch, and the late rejection then marks nothing (costing
at most one more rejection later, never a call stuck behind a worker that
has room).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable


class RoomBook:
    """The workers that turned this pool away and have not announced room since.

    Args:
        changed: Told the new ``known_full`` whenever it changes (the roster shows it to balancers).
    """

    __slots__ = ("_changed", "epochs", "known_full")

    def __init__(self, changed: Callable[[frozenset[uuid.UUID]], None] = lambda full: None) -> None:
        self.epochs: dict[uuid.UUID, int] = {}
        """uid -> how many times it announced room (read, never written, outside: `offer` without a call)."""
        self.known_full: frozenset[uuid.UUID] = frozenset()
        """Immutable, replaced on every change (a balancer may keep it for one dispatch)."""
        self._changed = changed

    def offer(self, uid: uuid.UUID) -> int:
        """The epoch to hand back to `rejected` if the call offered to ``uid`` now is turned away."""
        return self.epochs.get(uid, 0)

    def rejected(self, uid: uuid.UUID, epoch: int) -> bool:
        """``uid`` turned away a call offered at ``epoch``; True if it is now known full.

        Not if it announced room since that offer: its Room came after its
        refusal, and nothing else would tell us again.
        """
        if self.epochs.get(uid, 0) == epoch and uid not in self.known_full:
            self._set(self.known_full | {uid})
        return uid in self.known_full

    def announced(self, uid: uuid.UUID) -> None:
        """``uid`` said it has room (a Room frame, or a State answer with room)."""
        self.epochs[uid] = self.epochs.get(uid, 0) + 1
        if uid in self.known_full:
            self._set(self.known_full - {uid})

    def forget(self, uid: uuid.UUID) -> None:
        """``uid`` left the pool."""
        self.epochs.pop(uid, None)
        if uid in self.known_full:
            self._set(self.known_full - {uid})

    def _set(self, full: frozenset[uuid.UUID]) -> None:
        self.known_full = full
        self._changed(full)

    def __len__(self) -> int:
        return len(self.known_full)

    def __repr__(self) -> str:
        return f"<RoomBook {len(self.known_full)} known full>"
