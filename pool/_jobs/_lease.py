"""This process's owner lease as the process itself can know it: when a held job may start (I/O-free).

Another process takes what this one holds only once this one's lease ran
out in the store (`recover`): its running jobs pending again, its pending
ones given back, and either may then run there to its end. So a job this
process holds must not start once that may have happened:

    renewal answered (sent at s) ──> the lease holds until s + ttl, as written
    a job may start  ──> now < until - ttl/3           (a placement, its worker's start, and another
                     │                                  process's clock running ahead fit in ttl/3)
                     └─> and no lapse since it came    (its `lease_epoch` is the current one)
    renewal answered once a job could no longer start (at or after until - ttl/3)
                     ──> the lease may have run out meanwhile, as another process's clock saw it: `epoch` + 1

Renewals are sent every ttl/3 from the last one's sending, so a store that
answers within ttl/3 never stops a start. The worker checks the same bound:
a job's call carries ``start_by()`` (`Task.start_by`), and a worker that would
start it later declines it unstarted (issue 54); a placement delayed on its
way (a stalled process, a slow network) then never starts the job, and it
goes back to the store. The fence assumes what a lease always does: the
clocks of the processes and workers on one store agree within ttl/3 (NTP
keeps them within milliseconds).

A held job from an earlier epoch goes back to the store (`unlease`: fenced by
owner, a no-op if it is another's now) and is leased again like any other.
Jobs come in two ways, and each is stamped with the epoch it began in: a
lease (read before it is sent) and a submission kept by this process
(`claim` ... `arrived`), whose insert may commit while the lease is out.
"""

from __future__ import annotations

from collections import Counter


class OwnLease:
    """One dispatching process's owner lease, from its renewals' timing (see the module).

    Args:
        ttl: Seconds the lease lasts without renewal (``lease_ttl``; renewed every ttl/3).
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.until = 0.0  # the expiry the last answered renewal wrote (Unix seconds); 0: none yet
        self.epoch = 0  # + 1 at each renewal answered after the lease may have run out
        self._claims: Counter[int] = Counter()  # kept submissions on their way in, by the epoch each began in

    def renewed(self, sent: float, answered: float) -> bool:
        """A renewal written with ``sent`` was answered at ``answered``: True if the lease may have lapsed first."""
        lapsed = 0 < self.until - self.ttl / 3 <= answered
        if lapsed:
            self.epoch += 1
        self.until = sent + self.ttl
        return lapsed

    def holds(self, now: float) -> bool:
        """Whether a held job may start at ``now``: the lease surely holds for a renewal period more."""
        return now < self.start_by()

    def start_by(self) -> float:
        """The latest time a held job may start (Unix seconds): what its worker is told, and checks itself."""
        return self.until - self.ttl / 3

    def may_start(self, epoch: int, now: float) -> bool:
        """Whether a held job that came in ``epoch`` may start at ``now`` (no lapse since, and `holds`)."""
        return epoch == self.epoch and self.holds(now)

    def claim(self) -> None:
        """A submission this process keeps is on its way in (it began in the current epoch)."""
        self._claims[self.epoch] += 1

    def arrived(self) -> int:
        """One kept submission arrived (or failed): the epoch to hold it under, the oldest on its way in.

        Which of the submissions on their way in this is, is not known, so it
        is held under the oldest epoch and the newest is counted off: then the
        oldest left is never newer than that of any submission still on its
        way, whichever arrive first (a job held under too old an epoch goes
        back to the store, costing a lease, never a second run).
        """
        if not self._claims:
            return self.epoch
        newest = max(self._claims)
        self._claims[newest] -= 1
        oldest = min(self._claims)
        if not self._claims[newest]:
            del self._claims[newest]
        return oldest

    @property
    def in_flight(self) -> int:
        """Kept submissions on their way in."""
        return self._claims.total()

    def __repr__(self) -> str:
        return f"<OwnLease until={self.until:.3f} epoch={self.epoch} in_flight={self.in_flight}>"
