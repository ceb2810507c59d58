"""Discovery: how a pool learns about workers it did not spawn.

A backend is anything with ``subscribe()``, an async iterator of
`DiscoveryEvent` (worker added, updated, dropped). A subscriber MUST first
yield every worker it already knows as "added", then deltas, and MUST be
safe to cancel at any await. Three backends ship:

- `StaticDiscovery`: a fixed list of addresses (and an in-memory double:
  `add`/`drop` drive it from tests);
- `LocalDiscovery`: workers on this machine, through a registry directory
  (``worker_main --discovery local``);
- `LanDiscovery` (``_zeroconf``): workers on the LAN, through DNS-SD.

A worker's record, as published: uid, address, pid, version, tags,
capacity and whether it serves TLS (`WorkerMetadata`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any, Final, Literal, Protocol, runtime_checkable

import grpc

from ._config import default_registry
from ._connection import WorkerMetadata
from ._proto import leakypool_pb2 as pb
from ._worker_service import SERVICE

_log = logging.getLogger("leakypool.discovery")

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


class StaticDiscovery:
    """Workers at fixed addresses (``host:port``), plus an in-memory double.

    Each address is asked for its uid and capacity (the worker's State RPC)
    when a subscription starts; an address that does not answer within
    ``timeout`` is logged and skipped. `add` and `drop` change the set
    while subscriptions run, which makes this the backend for tests.

    Args:
        addresses: ``host:port`` of plain (non-TLS) workers.
        workers: Worker records to announce as they are (no RPC).
        timeout: Seconds to wait for each address's State answer.
    """

    def __init__(
        self, addresses: Iterable[str] = (), *, workers: Iterable[WorkerMetadata] = (), timeout: float = 5.0
    ) -> None:
        self._addresses = list(addresses)
        self._known: dict[uuid.UUID, WorkerMetadata] = {w.uid: w for w in workers}
        self._timeout = timeout
        self._subscribers: list[asyncio.Queue[DiscoveryEvent]] = []

    def add(self, worker: WorkerMetadata) -> None:
        """Announce (or update) ``worker`` to every subscription."""
        kind: EventKind = "updated" if worker.uid in self._known else "added"
        self._known[worker.uid] = worker
        self._publish(DiscoveryEvent(kind, worker))

    def drop(self, uid: uuid.UUID) -> None:
        """Withdraw worker ``uid`` from every subscription."""
        worker = self._known.pop(uid, None)
        if worker is not None:
            self._publish(DiscoveryEvent("dropped", worker))

    def _publish(self, event: DiscoveryEvent) -> None:
        for queue in self._subscribers:
            queue.put_nowait(event)

    async def subscribe(self) -> AsyncIterator[DiscoveryEvent]:
        """The known workers (resolving the addresses first), then changes."""
        for address in self._addresses:
            worker = await probe(address, self._timeout)
            if worker is not None and worker.uid not in self._known:
                self._known[worker.uid] = worker
        queue: asyncio.Queue[DiscoveryEvent] = asyncio.Queue()
        self._subscribers.append(queue)
        try:
            for worker in list(self._known.values()):
                yield DiscoveryEvent("added", worker)
            while True:
                yield await queue.get()
        finally:
            self._subscribers.remove(queue)


async def probe(address: str, timeout: float) -> WorkerMetadata | None:
    """Ask the (plain) worker at ``address`` who it is; None if it does not answer."""
    async with grpc.aio.insecure_channel(address) as channel:
        state_rpc = channel.unary_unary(
            f"/{SERVICE}/State",
            request_serializer=pb.StateRequest.SerializeToString,
            response_deserializer=pb.WorkerState.FromString,
        )
        try:
            state = await state_rpc(pb.StateRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            _log.warning("no worker answered at %s: %s", address, exc.code().name)
            return None
    return WorkerMetadata(
        uid=uuid.UUID(state.uid), address=address, pid=state.pid, version=state.version, capacity=state.capacity
    )


DEFAULT_POLL_S: Final[float] = 0.2
"""How often `LocalDiscovery` rereads its registry directory."""


def record_to_json(worker: WorkerMetadata) -> str:
    """A worker record as the registry file stores it."""
    data: dict[str, Any] = dataclasses.asdict(worker)
    data["uid"] = str(worker.uid)
    data["tags"] = sorted(worker.tags)
    data.pop("local")
    return json.dumps(data)


def record_from_json(text: str) -> WorkerMetadata:
    """Inverse of `record_to_json` (raises ValueError/KeyError/TypeError on garbage)."""
    data = json.loads(text)
    return WorkerMetadata(
        uid=uuid.UUID(data["uid"]),
        address=str(data["address"]),
        pid=int(data["pid"]),
        version=str(data.get("version", "")),
        tags=frozenset(data.get("tags", ())),
        capacity=int(data.get("capacity", 0)),
        tls=bool(data.get("tls", False)),
    )


class LocalPublisher:
    """A worker's entry in a local registry directory: written at start, removed on drain."""

    def __init__(self, directory: str, worker: WorkerMetadata) -> None:
        self._path = os.path.join(directory, f"{worker.uid}.json")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        temporary = self._path + ".tmp"
        with open(temporary, "w") as f:
            f.write(record_to_json(worker))
        os.replace(temporary, self._path)  # readers never see half a record

    def withdraw(self) -> None:
        """Remove the entry (idempotent)."""
        try:
            os.unlink(self._path)
        except FileNotFoundError:
            pass


class LocalDiscovery:
    """Workers on this machine that registered in a directory (``--discovery local``).

    Reads the directory every ``poll_interval`` seconds. An entry whose
    process no longer exists (a worker killed before it could withdraw) is
    ignored, and removed.

    Args:
        directory: The registry (default: `default_registry`, the same
            default ``worker_main`` uses).
        poll_interval: Seconds between reads.
    """

    def __init__(self, directory: str | None = None, *, poll_interval: float = DEFAULT_POLL_S) -> None:
        self.directory = directory or default_registry()
        self._poll = poll_interval

    async def subscribe(self) -> AsyncIterator[DiscoveryEvent]:
        """Workers registered now, then changes."""
        known: dict[uuid.UUID, WorkerMetadata] = {}
        while True:
            current = self._read()
            for uid, worker in current.items():
                if uid not in known:
                    yield DiscoveryEvent("added", worker)
                elif known[uid] != worker:
                    yield DiscoveryEvent("updated", worker)
            for uid, worker in known.items():
                if uid not in current:
                    yield DiscoveryEvent("dropped", worker)
            known = current
            await asyncio.sleep(self._poll)

    def _read(self) -> dict[uuid.UUID, WorkerMetadata]:
        found: dict[uuid.UUID, WorkerMetadata] = {}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return found
        for name in names:
            if not name.endswith(".json"):
                continue
            path = os.path.join(self.directory, name)
            try:
                with open(path) as f:
                    worker = record_from_json(f.read())
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if _alive(worker.pid):
                found[worker.uid] = worker
            else:
                _remove_stale(path)
        return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
