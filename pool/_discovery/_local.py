"""Discovery on one machine: workers register in a directory; `LocalDiscovery` reads it.

The worker's side (`LocalPublisher`) writes one JSON record per worker,
atomically, and removes it when the worker drains; a record whose process
is gone (a worker killed before it could withdraw) is ignored and removed.

The directory decides which workers a pool dials, so both sides refuse
one that is not private (`pool._base._private`: this user's, mode 0700):
in a shared ``/tmp`` another user could make it first and plant records
(issue 43). A record's worker must still prove itself when dialled.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any, Final

from .._base import check_private, private_directory, public
from .._config import default_registry
from .._errors import ConfigError
from .._transport import WorkerMetadata
from ._protocol import DiscoveryEvent

_log = logging.getLogger("leakypool.discovery")

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
        interpreter=str(data.get("interpreter", "")),
        build=str(data.get("build", "")),
    )


class LocalPublisher:
    """A worker's entry in a local registry directory: written at start, removed on drain.

    Raises:
        ConfigError: the directory is not private (another user's, or open to others).
    """

    def __init__(self, directory: str, worker: WorkerMetadata) -> None:
        self._path = os.path.join(directory, f"{worker.uid}.json")
        private_directory(directory, what="--discovery local: the registry directory")
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
        self.directory: str = directory or default_registry()
        self._poll = poll_interval
        self._refused = ""  # why the directory was last refused (logged once per reason)

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
            check_private(self.directory, what="LocalDiscovery: the registry directory")
            names = os.listdir(self.directory)
        except ConfigError as exc:
            if not os.path.lexists(self.directory):
                return found  # no worker registered yet
            if str(exc) != self._refused:
                self._refused = str(exc)
                _log.error("%s; reading no worker from it", exc)
            return found
        except FileNotFoundError:
            return found
        self._refused = ""
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


public(LocalDiscovery)
