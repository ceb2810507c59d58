"""A worker's row in a store registry (``--registry URL``): recorded at start, refreshed, removed on exit.

The row lives ``--registry-ttl`` seconds past its last refresh; the worker
refreshes it three times per TTL, so one lost refresh costs nothing and a
worker killed outright (SIGKILL, a lost host) expires within its TTL. A
worker that drains (idle timeout, SIGTERM, max lifetime) deletes its row
first, so pools stop sending it work at once. A refresh that fails (the
database restarting) is logged and retried with a new connection; the
row is written back as soon as the store answers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any, Final

from .._base import TaskOwner, lost_connection, redacted
from .._discovery import Registry, connect, record_to_json, seal_record
from .._errors import ConfigError, StoreError
from .._transport import Seal, WorkerMetadata, bind_address
from ._keys import worker_seal

if TYPE_CHECKING:
    from .._config import WorkerConfig
    from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REFRESHES_PER_TTL: Final[int] = 3
"""Refreshes within one TTL: a record survives two lost refreshes."""

START_BACKOFF_S: Final[tuple[float, ...]] = (0.1, 0.2, 0.5, 1.0)
"""Waits between tries to reach a registry out of reach at start (then 1 s each, up to ``--store-retry``)."""

REMOVE_TIMEOUT_S: Final[float] = 5.0
"""How long removing the row on exit may take before the worker exits anyway (the row then expires)."""


class RegistryRecord:
    """This worker's row in the registry at ``url``.

    Args:
        url: The registry (``postgresql://...`` or ``sqlite:///PATH``).
        worker: The record.
        ttl: Seconds the row lives without a refresh.
        retry: Seconds `start` waits for a registry out of reach (``--store-retry``; 0: one try).
        seal: What the record is sealed with: pools admit only records sealed under a secret they hold.
    """

    def __init__(self, url: str, worker: WorkerMetadata, ttl: float, retry: float = 0.0, *, seal: Seal) -> None:
        self._url = url
        self._retry = retry
        self._uid = str(worker.uid)
        self._record = seal_record(seal, self._uid, record_to_json(worker))
        self._ttl = ttl
        self._registry: Registry | None = None
        self._withdrawn = False
        self._removed = asyncio.Event()  # set once withdraw() has finished (removed, or given up)
        self._lock = asyncio.Lock()  # one statement at a time on the connection; no refresh after the removal

    async def start(self, tasks: TaskOwner) -> None:
        """Write the row, then keep it fresh in a task ``tasks`` owns.

        Raises:
            StoreError: the registry cannot be reached within ``retry`` s, or refuses
                (the worker does not start).
            ConfigError: not a registry URL, or its driver is missing.
        """
        self._registry = await self._connect()
        try:
            await self._registry.put(self._uid, self._record, self._ttl)
        except BaseException:
            await self._drop_connection()  # the worker does not start: nothing else would close it
            raise
        tasks.spawn(self._refresh(), name="refresh the registry record")

    async def _connect(self) -> Registry:
        """The registry, waiting up to ``retry`` s (a log line per back-off) while it is out of reach."""
        deadline = time.monotonic() + self._retry
        for tries in itertools.count(1):
            try:
                return await connect(self._url)
            except StoreError as exc:
                left = deadline - time.monotonic()
                if left <= 0 or not lost_connection(exc):  # a refusal (credentials, a bad URL): at once
                    raise
                wait = min(left, START_BACKOFF_S[min(tries, len(START_BACKOFF_S)) - 1])
                _log.warning(
                    "%s; try %d, again in %.2fs (gives up in %.1fs: --store-retry %gs)",
                    exc,
                    tries,
                    wait,
                    left,
                    self._retry,
                )
                await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    async def _refresh(self) -> None:
        while not self._withdrawn:
            await asyncio.sleep(self._ttl / REFRESHES_PER_TTL)
            if self._withdrawn:
                return
            fresh: Registry | None = None
            if self._registry is None:
                try:  # outside the lock: a connection that takes CONNECT_TIMEOUT_S must not hold up withdraw()
                    fresh = await connect(self._url)
                except StoreError as exc:
                    _log.warning("could not refresh this worker's record (%s); retrying", exc)
                    continue
            async with contextlib.AsyncExitStack() as unkept:
                if fresh is not None:  # closed on the way out unless kept (cancelled waiting for the lock, too)
                    unkept.push_async_callback(_close, fresh)
                async with self._lock:
                    if fresh is not None and not self._withdrawn and self._registry is None:
                        self._registry = fresh
                        unkept.pop_all()
                    if self._withdrawn:
                        return
                    if self._registry is None:
                        continue
                    try:
                        await self._registry.put(self._uid, self._record, self._ttl)
                    except StoreError as exc:
                        _log.warning("could not refresh this worker's record (%s); retrying", exc)
                        await self._drop_connection()

    async def withdraw(self) -> None:
        """Delete the row (idempotent; bounded: if the store does not answer, the row expires).

        No refresh starts once this is called; one in flight is waited for within `REMOVE_TIMEOUT_S`.
        A second call returns once the first one is done (the worker's exit waits for the removal
        its drain started).
        """
        if self._withdrawn:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REMOVE_TIMEOUT_S * 2):
                    await self._removed.wait()
            return
        self._withdrawn = True
        try:
            async with asyncio.timeout(REMOVE_TIMEOUT_S), self._lock:
                if self._registry is None:
                    self._registry = await connect(self._url)
                await self._registry.remove(self._uid)
        except (StoreError, TimeoutError) as exc:
            _log.warning(
                "could not remove this worker's record at %s (%s); it expires by itself", redacted(self._url), exc
            )
        finally:
            try:
                await self._drop_connection()
            finally:
                self._removed.set()

    async def _drop_connection(self) -> None:
        registry, self._registry = self._registry, None
        if registry is not None:
            await _close(registry)


async def _close(registry: Registry) -> None:
    with contextlib.suppress(Exception):
        await registry.close()


async def start_registry(config: WorkerConfig, service: WorkerService, info: dict[str, Any]) -> RegistryRecord | None:
    """Record this worker at ``--registry`` (if set), withdrawn as soon as it drains.

    Raises:
        ConfigError: the registry cannot be reached or used (the worker exits with status 2).
    """
    if not config.registry:
        return None
    # a wildcard --host without --advertise was refused at start-up (`check_registry`): no one could dial it
    address = bind_address(config.advertise or config.host, info["port"])
    worker = WorkerMetadata(
        uid=uuid.UUID(info["uid"]),
        address=address,
        pid=info["pid"],
        version=info["version"],
        tags=frozenset(config.tags),
        capacity=info["capacity"],
        tls=config.tls,
        interpreter=info.get("interpreter", ""),
        build=info.get("build", ""),
    )
    record = RegistryRecord(config.registry, worker, config.registry_ttl, config.store_retry, seal=worker_seal(config))
    try:
        await record.start(service.tasks)
    except StoreError as exc:
        raise ConfigError(f"--registry: cannot record this worker: {exc}") from None
    service.lifecycle.on_drain(lambda: service.tasks.spawn(record.withdraw(), name="withdraw from the registry"))
    return record
