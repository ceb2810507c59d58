"""How many workers to ask a provisioner for: the I/O-free decision behind remote growth.

Work that finds no worker with room asks for capacity ("starved"). The
plan answers how many workers to request now, given:

- ``max_workers``: the pool's members plus the requests not yet joined
  never exceed it;
- ``max_outstanding``: only a few requests are in flight at once (an
  orchestrator that is slow to start tasks is not flooded);
- ``provision_timeout``: a request that has not joined by then stops
  counting (the caller logs it), so a lost request cannot block growth;
- back-off: after a provisioner raises, nothing is requested until the
  back-off ends; it doubles on each failure in a row and resets once a
  requested worker joins (a provisioner that returns without error but
  whose workers never join keeps its back-off: only a worker proves it works).

Time is passed in (``now``, monotonic seconds), so the plan is a pure
state machine that hypothesis can drive (``PlanMachine`` in tests/unit/pool/_fleet/test_provision.py).
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Final

MAX_OUTSTANDING: Final[int] = 4
"""Requests in flight (asked for, not joined) at once, by default."""

BACKOFF_FIRST_S: Final[float] = 1.0
"""Pause after a provisioner's first failure in a row."""

BACKOFF_MAX_S: Final[float] = 30.0
"""The longest pause between attempts of a provisioner that keeps failing."""


@dataclasses.dataclass
class ProvisionPlan:
    """Outstanding requests and back-off of one pool's provisioner.

    Args:
        max_workers: Members plus outstanding requests at most.
        provision_timeout: Seconds a request counts before it is given up.
        max_outstanding: Requests in flight at once.
    """

    max_workers: int
    provision_timeout: float
    max_outstanding: int = MAX_OUTSTANDING
    outstanding: dict[uuid.UUID, float] = dataclasses.field(default_factory=dict)
    """Request uid -> the monotonic time it stops counting."""
    failures: int = 0
    """Failures in a row (they set the back-off)."""
    resume_at: float = 0.0
    """No request before this monotonic time (back-off)."""

    def wanted(self, now: float, members: int) -> int:
        """How many workers to request now, for one signal of unmet demand (0 or 1)."""
        if now < self.resume_at:
            return 0
        if len(self.outstanding) >= self.max_outstanding:
            return 0
        return 1 if members + len(self.outstanding) < self.max_workers else 0

    def requested(self, uid: uuid.UUID, now: float) -> None:
        """A request for worker ``uid`` was made at ``now``."""
        self.outstanding[uid] = now + self.provision_timeout

    def joined(self, uid: uuid.UUID) -> bool:
        """Worker ``uid`` joined; True if it was one we asked for (it stops counting as outstanding)."""
        if self.outstanding.pop(uid, None) is None:
            return False
        self.failures = 0
        return True

    def expired(self, now: float) -> list[uuid.UUID]:
        """Requests whose time ran out (they stop counting); the caller logs them."""
        gone = [uid for uid, deadline in self.outstanding.items() if deadline <= now]
        for uid in gone:
            del self.outstanding[uid]
        return gone

    def failed(self, uid: uuid.UUID, now: float) -> bool:
        """The provisioner raised for ``uid``; True if this failure opens a back-off (log it), False if one runs.

        The request stops counting; no request is made until the back-off ends.
        """
        self.outstanding.pop(uid, None)
        opens = now >= self.resume_at
        if opens:
            self.failures += 1
            self.resume_at = now + backoff_s(self.failures)
        return opens


def backoff_s(failures: int) -> float:
    """The pause after ``failures`` failures in a row: 1, 2, 4 ... 30 seconds."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, failures - 1))
