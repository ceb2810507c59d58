"""How many leased jobs one scheduler offers to workers at once: a slow start, as TCP's (I/O-free).

    accepted            -> the window doubles (up to MAX_PLACING): room for more placements
    found no worker     -> the window drops to one; wait for the next capacity event,
                           unless one came while the placement was under way (try again now)
    capacity event      -> a new epoch: a refusal or a full limit seen before it is stale

So a freed slot is probed by one job, not by the whole batch, and a busy
pool is not flooded with placements it will refuse.
"""

from __future__ import annotations

from typing import Final

MAX_PLACING: Final[int] = 256
"""Jobs being offered to workers at once (each awaits one worker's Accept)."""


class PlacementWindow:
    """The placements a scheduler may run at once, and whether it waits for a capacity event.

    Attributes:
        size: Placements allowed at once (1 to `MAX_PLACING`).
        epoch: Capacity events so far: a placement notes the epoch it began in.
        no_worker: The last placement found no worker and no capacity event came since.
    """

    __slots__ = ("epoch", "no_worker", "size")

    def __init__(self) -> None:
        self.size = MAX_PLACING
        self.epoch = 0
        self.no_worker = False

    def allows(self, placing: int) -> bool:
        """Whether one more placement may start while ``placing`` are under way."""
        return not self.no_worker and placing < self.size

    def capacity_changed(self) -> None:
        """A worker or a limit slot may have freed: a new epoch, and workers are worth asking again."""
        self.no_worker = False
        self.epoch += 1

    def probe(self) -> None:
        """Ask the workers again without an event (the backstop tick: a verdict may change unseen)."""
        self.no_worker = False

    def shrink(self) -> None:
        """Placements found no room: one at a time from here, until they succeed again."""
        self.size = 1

    def refused(self, epoch: int) -> bool:
        """A placement begun in ``epoch`` found no worker: True to try again now (capacity freed since)."""
        self.shrink()
        if epoch == self.epoch:
            self.no_worker = True  # wait for the next capacity event
            return False
        return True

    def accepted(self) -> bool:
        """A worker accepted a placement: True if the window grew (room for more placements now)."""
        if self.size >= MAX_PLACING:
            return False
        self.size = min(MAX_PLACING, self.size * 2)
        return True

    def __repr__(self) -> str:
        return f"<PlacementWindow size={self.size} epoch={self.epoch} no_worker={self.no_worker}>"
