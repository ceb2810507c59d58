"""When the store's next job comes due, as one scheduler knows it: it sleeps until then, not until the tick.

    a delayed submit, a retry's back-off, a job a rate holds back  ->  the store's next_due
    known:   sleep until it (or an event)         unknown or passed:  read it from the store first

Read again only when it may have changed (`NextDue.forget`): a wake (a
submit, a notice), a lease (it may set due times), an attempt back in the
store, the backstop tick; a due time this process learns of itself
(`NextDue.learn`) needs no read.
"""

from __future__ import annotations

import math

from ._store import JobStore, next_due


class NextDue:
    """The earliest future due time in the store (Unix seconds; inf: none) and whether it is still known."""

    __slots__ = ("at", "known")

    def __init__(self) -> None:
        self.at = math.inf
        self.known = False  # False: the store may hold an earlier one (read it before sleeping)

    def forget(self) -> None:
        """The store may hold an earlier due time now: read it before the next sleep."""
        self.known = False

    def learn(self, when: float) -> bool:
        """A job is due at ``when`` (future): True if that is sooner than known (sleep less)."""
        if when < self.at:
            self.at = when
            return True
        return False

    async def seconds(self, store: JobStore, now: float, seen: float | None = None) -> float:
        """Seconds from ``now`` to the next due time no lease has seen, read from ``store`` if unknown or passed.

        ``seen``: when the last lease looked (default ``now``). A job that
        came due between then and ``now`` makes this 0 or less: it is due and
        nobody leased it (a timer that fired a little early leased just before
        it), so lease now. Without it the job would wait for the tick.

        Raises:
            StoreError: the store could not be read.
        """
        if not self.known or self.at <= now:
            self.at, self.known = await next_due(store, now if seen is None else min(seen, now)), True
        return self.at - now
