"""The discovery protocol: a backend yields `DiscoveryEvent`s to the pools that subscribe."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Literal, Protocol, runtime_checkable

from .._base import public
from .._transport import WorkerMetadata

EventKind = Literal["added", "updated", "dropped"]


@dataclasses.dataclass(frozen=True, slots=True)
class DiscoveryEvent:
    """A change in the set of workers a backend sees."""

    kind: EventKind
    worker: WorkerMetadata


@runtime_checkable
class DiscoveryLike(Protocol):
    """A source of workers for a pool.

    ``subscribe()`` MUST yield the workers known now (as "added") before
    any delta, MUST be cancellation-safe, and may be called more than once
    (each call is an independent subscription).
    """

    def subscribe(self) -> AsyncIterator[DiscoveryEvent]:
        """Events, from now until cancelled."""
        ...


public(DiscoveryEvent, DiscoveryLike)
