"""Discovery through a store: workers record themselves in a table, pools read it. No multicast.

``leakypool-worker --registry URL`` keeps a row for itself in the
registry table (`_registry`); `StoreDiscovery(URL)` admits the workers
recorded there. Arrivals and departures reach a pool at once (PostgreSQL
LISTEN/NOTIFY; SQLite ``PRAGMA data_version``); an expired row (a worker
killed before it could remove it) is noticed at the next poll. Works
wherever the database is reachable: across subnets, containers, VPCs and
Kubernetes, where zeroconf's multicast does not travel.

The registry says where a worker is, never who may use it: mutual TLS
stays required off loopback (the worker refuses to start without it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Final

from .._base._public import public
from .._errors import StoreError
from .._transport._rpc import WorkerMetadata
from ._local import record_from_json
from ._protocol import DiscoveryEvent
from ._registry import Registry, connect, redacted

_log = logging.getLogger("leakypool.discovery")

POLL_S: Final[float] = 1.0
"""How often a subscriber rereads the registry without a notification (expired rows are noticed then)."""

RETRY_S: Final[tuple[float, ...]] = (0.5, 1.0, 2.0, 5.0)
"""Pauses between attempts to reach a registry that is down (the known workers stay meanwhile)."""


class StoreDiscovery:
    """Workers recorded in a registry table (``leakypool-worker --registry URL``).

    Several pools may share one registry and its workers. While the
    registry is unreachable the workers already known stay in the pool
    (they still serve); the subscription reconnects with back-off.

    Args:
        url: ``postgresql://...`` (LISTEN/NOTIFY; several hosts) or
            ``sqlite:///PATH`` (one host).
        worker_url: The URL the workers this pool provisions record
            themselves at, when they reach the database by another address
            (default: ``url``).
        poll_interval: Seconds between rereads without a notification.
    """

    def __init__(self, url: str, *, worker_url: str | None = None, poll_interval: float = POLL_S) -> None:
        self.url: str = url
        self.worker_url: str = worker_url or url
        self._poll = poll_interval

    async def subscribe(self) -> AsyncIterator[DiscoveryEvent]:
        """Workers recorded now (as "added"), then arrivals, changes and departures."""
        known: dict[uuid.UUID, WorkerMetadata] = {}
        failures = 0
        while True:
            try:
                registry = await connect(self.url)
            except StoreError as exc:
                delay = RETRY_S[min(failures, len(RETRY_S) - 1)]
                failures += 1
                _log.warning("%s; %d known workers stay, retrying in %.1fs", exc, len(known), delay)
                await asyncio.sleep(delay)
                continue
            failures = 0
            try:
                async for event in self._follow(registry, known):
                    yield event
            except StoreError as exc:
                _log.warning("%s; reconnecting", exc)
            finally:
                await registry.close()

    async def _follow(
        self, registry: Registry, known: dict[uuid.UUID, WorkerMetadata]
    ) -> AsyncIterator[DiscoveryEvent]:
        wake = asyncio.Event()
        wake.set()
        await registry.listen(wake.set)
        watcher = asyncio.ensure_future(registry.watch())
        try:
            while True:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll):
                        await wake.wait()
                if watcher.done():
                    watcher.result()  # raises StoreError when the connection was lost
                wake.clear()
                for event in diff(known, parse(await registry.live())):
                    yield event
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await watcher

    def __repr__(self) -> str:
        return f"StoreDiscovery({redacted(self.url)!r})"


def parse(rows: dict[str, str]) -> dict[uuid.UUID, WorkerMetadata]:
    """Registry rows as worker records (a row that does not parse is skipped)."""
    found = {}
    for text in rows.values():
        try:
            worker = record_from_json(text)
        except (ValueError, KeyError, TypeError):
            continue
        found[worker.uid] = worker
    return found


def diff(known: dict[uuid.UUID, WorkerMetadata], current: dict[uuid.UUID, WorkerMetadata]) -> list[DiscoveryEvent]:
    """The events that turn ``known`` into ``current``; ``known`` is updated in place."""
    events = [DiscoveryEvent("dropped", w) for uid, w in known.items() if uid not in current]
    for uid, worker in current.items():
        if uid not in known:
            events.append(DiscoveryEvent("added", worker))
        elif known[uid] != worker:
            events.append(DiscoveryEvent("updated", worker))
    known.clear()
    known.update(current)
    return events


public(StoreDiscovery)
