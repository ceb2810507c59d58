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

What a pool reads there is bounded before anything else (issue 51): at
most `MAX_ROWS` rows, none longer than `RECORD_MAX_BYTES` (longer ones stay
in the database), a record admitted only if it is sealed with a secret
the pool holds for that worker's uid (`seal_record`: a role that can write
the table but holds no secret adds no member), and at most `ADMIT_PER_S`
new members a second (a fleet of `max_workers` still joins within seconds).
What is skipped is said once, in one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Final

from .._base import public
from .._config import default_secret_file
from .._errors import StoreError
from .._transport import Seal, SecretSource, WorkerMetadata
from ._local import record_from_json
from ._protocol import DiscoveryEvent
from ._registry import RECORD_MAX_BYTES, Registry, Rows, connect, open_record, redacted

_log = logging.getLogger("leakypool.discovery")

POLL_S: Final[float] = 1.0
"""How often a subscriber rereads the registry without a notification (expired rows are noticed then)."""

RETRY_S: Final[tuple[float, ...]] = (0.5, 1.0, 2.0, 5.0)
"""Pauses between attempts to reach a registry that is down (the known workers stay meanwhile)."""

ADMIT_PER_S: Final[float] = 200.0
"""New members admitted a second at most, after a first burst of as many (the rest wait for the next read)."""


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
        secret_file: The secret the workers seal their records with, when it is
            not the pool's own (``secret=`` / ``secret_file=`` of the pool, else
            this user's): a record sealed with no secret held is never admitted.
    """

    def __init__(
        self,
        url: str,
        *,
        worker_url: str | None = None,
        poll_interval: float = POLL_S,
        secret_file: str | None = None,
    ) -> None:
        self.url: str = url
        self.worker_url: str = worker_url or url
        self._poll = poll_interval
        self._seal: Seal | None = None
        if secret_file:
            source = SecretSource(path=secret_file)
            self._seal = Seal(source.secrets, source.describe())
        self._reported: set[str] = set()  # rows already named in a log line as skipped

    def adopt_secret(self, secrets: Callable[[], tuple[str, ...]], where: str) -> None:
        """Check records with the pool's secrets, unless ``secret_file`` was given (the pool calls this)."""
        if self._seal is None:
            self._seal = Seal(secrets, where)

    def _seal_or_default(self) -> Seal:
        if self._seal is None:
            source = SecretSource(default_path=default_secret_file())
            self._seal = Seal(source.secrets, source.describe())
        return self._seal

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
        bucket = _Bucket(ADMIT_PER_S)
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
                found = self._parse(await registry.live())
                held_back = admit_at_rate(known, found, bucket.take)
                for event in diff(known, found):
                    yield event
                if held_back:
                    wake.set()
                    await asyncio.sleep(1.0 / ADMIT_PER_S * held_back if held_back < ADMIT_PER_S else 1.0)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, StoreError):
                await watcher

    def __repr__(self) -> str:
        return f"StoreDiscovery({redacted(self.url)!r})"

    def _parse(self, rows: Rows) -> dict[uuid.UUID, WorkerMetadata]:
        """The rows' records that are sealed for their uid and parse; the others named once in a log line."""
        found, skipped = parse(rows.records, self._seal_or_default())
        fresh = [uid for uid in skipped if uid not in self._reported]
        if fresh or (rows.oversize and "oversize" not in self._reported):
            self._reported.update(fresh)
            if rows.oversize:
                self._reported.add("oversize")
            _log.warning(
                "registry %s: skipped %d row(s) not sealed with %s, or that do not parse (first: %s), and %d "
                "over %d bytes: a writer without the secret, or workers with another secret (docs/lan-security.md)",
                redacted(self.url),
                len(skipped),
                self._seal_or_default().where,
                (fresh or skipped or ["-"])[0],
                rows.oversize,
                RECORD_MAX_BYTES,
            )
        return found


def parse(rows: dict[str, str], seal: Seal) -> tuple[dict[uuid.UUID, WorkerMetadata], list[str]]:
    """Registry rows as worker records, and the uids of rows skipped (not sealed for their uid, or not a record)."""
    found: dict[uuid.UUID, WorkerMetadata] = {}
    skipped = []
    for uid, stored in rows.items():
        text = open_record(seal, uid, stored)
        try:
            if text is None:
                raise ValueError("not sealed")
            worker = record_from_json(text)
            if str(worker.uid) != uid:
                raise ValueError("a record under another uid")
        except (ValueError, KeyError, TypeError):
            skipped.append(uid)
            continue
        found[worker.uid] = worker
    return found, skipped


def admit_at_rate(
    known: dict[uuid.UUID, WorkerMetadata], found: dict[uuid.UUID, WorkerMetadata], take: Callable[[], bool]
) -> int:
    """Drop from ``found`` the new members the rate does not let in now (in uid order); how many were held back."""
    held_back = 0
    for uid in sorted(uid for uid in found if uid not in known):
        if not take():
            del found[uid]
            held_back += 1
    return held_back


class _Bucket:
    """A token bucket: ``rate`` tokens a second, holding at most ``rate``."""

    def __init__(self, rate: float) -> None:
        self._rate = rate
        self._tokens = rate
        self._at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._rate, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


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
