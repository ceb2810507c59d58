"""`StaticDiscovery`: workers at fixed addresses, and the in-memory double tests drive."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterable

from .._base import public
from .._config import default_secret_file, secret_settings
from .._transport import SecretSource, Trust, WorkerMetadata
from ._protocol import DiscoveryEvent, EventKind

_log = logging.getLogger("leakypool.discovery")


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
        secret: The workers' secret, which the probe proves it holds and they
            prove to it (default: ``LEAKYPOOL_SECRET``, else the file in
            ``LEAKYPOOL_SECRET_FILE``, else this user's own; as a pool finds it).
        secret_file: A file holding it.

    Raises:
        ConfigError: ``secret_file`` (or ``LEAKYPOOL_SECRET_FILE``) cannot be read.
    """

    def __init__(
        self,
        addresses: Iterable[str] = (),
        *,
        workers: Iterable[WorkerMetadata] = (),
        timeout: float = 5.0,
        secret: str | None = None,
        secret_file: str | None = None,
    ) -> None:
        self._addresses = list(addresses)
        self._trust: Trust | None = None
        if self._addresses:  # only a probe proves itself: no file is read for an in-memory double
            given, path = secret_settings(secret, secret_file)
            self._trust = Trust.of(source=SecretSource(given, path, default_path=default_secret_file()))
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
            worker = await probe(address, self._timeout, self._trust)
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


async def probe(address: str, timeout: float, trust: Trust | None = None) -> WorkerMetadata | None:
    """Ask the (plain) worker at ``address`` who it is (it proves its uid in the handshake); None if it does not answer."""
    from .._call import open_channel

    channel = open_channel(address, trust or Trust.of())
    try:
        state = await channel.state(timeout)
    except Exception as exc:  # noqa: BLE001 - whatever the channel raised, channel.failure() names it; the address is skipped
        code, detail = channel.failure(exc)
        _log.warning("no worker answered at %s: %s %s", address, code, detail)
        return None
    finally:
        await channel.close()
    if channel.uid is None or str(channel.uid) != state.uid:
        _log.warning("the worker at %s proved to be %s but says it is %s: skipped", address, channel.uid, state.uid)
        return None
    return WorkerMetadata(
        uid=channel.uid,
        address=address,
        pid=state.pid,
        version=state.version,
        capacity=state.capacity,
        interpreter=state.interpreter,
        build=state.build,
    )


public(StaticDiscovery)
