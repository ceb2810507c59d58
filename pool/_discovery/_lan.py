"""LAN discovery over zeroconf DNS-SD: the only module that imports zeroconf.

A worker started with ``--discovery lan`` publishes one service instance,
``<uid>._leakypool._tcp.local.``, whose SRV/A records give its address and
port and whose TXT record carries the rest of its `WorkerMetadata` (uid,
pid, version, tags, capacity, tls). It withdraws the instance (a DNS-SD
goodbye, TTL 0) as soon as it starts draining, so pools drop it at once.

`LanDiscovery` browses for the service type and turns the browser's
added / updated / removed callbacks into `DiscoveryEvent`s.

Registration probes the name first (RFC 6762 §8.1: three probes 250 ms
apart), so a worker appears on the LAN about 1.2 s after it starts; a
withdrawal is seen in milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final

from zeroconf import InterfaceChoice, IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from .._base import TaskOwner, public
from .._transport import WorkerMetadata
from ._protocol import DiscoveryEvent, EventKind

_log = logging.getLogger("leakypool.discovery")

SERVICE_TYPE: Final[str] = "_leakypool._tcp.local."
"""The DNS-SD service type leakypool workers publish (override to run separate clusters)."""

RESOLVE_TIMEOUT_MS: Final[int] = 3000
"""How long a pool waits for a found instance's records before skipping it."""


def _interfaces(interfaces: Sequence[str]) -> InterfaceChoice | list[str]:
    return list(interfaces) if interfaces else InterfaceChoice.All


def advertised_addresses(host: str, advertise: str) -> list[str]:
    """The IPv4 addresses to publish for a worker bound to ``host``."""
    if advertise:
        return [advertise]
    if host not in ("0.0.0.0", "::", ""):  # noqa: S104 - tells a wildcard bind apart, binds nothing
        return [socket.gethostbyname(host)]
    import ifaddr  # a zeroconf dependency

    found = [
        ip.ip
        for adapter in ifaddr.get_adapters()
        for ip in adapter.ips
        if isinstance(ip.ip, str) and not ip.ip.startswith("127.")
    ]
    return found or ["127.0.0.1"]


class LanPublisher:
    """A worker's DNS-SD instance: registered at start, withdrawn on drain.

    Args:
        worker: The record to publish (its ``address`` host part is ignored).
        addresses: IPv4 addresses to publish.
        port: The worker's port.
        interfaces: Addresses of the interfaces to use (default: all).
        service_type: The DNS-SD type (default `SERVICE_TYPE`).
    """

    def __init__(
        self,
        worker: WorkerMetadata,
        addresses: Sequence[str],
        port: int,
        *,
        interfaces: Sequence[str] = (),
        service_type: str = SERVICE_TYPE,
    ) -> None:
        self._zc = AsyncZeroconf(interfaces=_interfaces(interfaces), ip_version=IPVersion.V4Only)
        self._info = AsyncServiceInfo(
            service_type,
            f"{worker.uid}.{service_type}",
            port=port,
            properties={
                "uid": str(worker.uid),
                "pid": str(worker.pid),
                "version": worker.version,
                "tags": ",".join(sorted(worker.tags)),
                "capacity": str(worker.capacity),
                "tls": "1" if worker.tls else "0",
                "interpreter": worker.interpreter,
                "build": worker.build,
            },
            server=f"{worker.uid}.local.",
            parsed_addresses=list(addresses),
        )
        self._registered: asyncio.Task[None] | None = None
        self._withdrawing = asyncio.Lock()
        self._withdrawn = False

    def start(self, tasks: TaskOwner, on_published: Callable[[], None] = lambda: None) -> None:
        """Register in the background, as a task of ``tasks`` (probing takes ~1.2 s; the worker serves meanwhile).

        ``on_published`` runs once the instance is announced.
        """
        self._registered = tasks.spawn(self._register(on_published), name="publish on the LAN")

    async def _register(self, on_published: Callable[[], None]) -> None:
        try:
            # The first await probes and registers; the awaitable it returns
            # finishes the announcements. Awaiting both leaves no zeroconf task
            # behind (an unawaited one is "destroyed but pending" at exit).
            announced = await self._zc.async_register_service(self._info)
            await announced
        except Exception:  # noqa: BLE001 - zeroconf's faults are many; logged, the worker serves unannounced
            _log.exception("could not publish this worker on the LAN")
        else:
            _log.info("published %s on the LAN", self._info.name)
            on_published()

    async def withdraw(self) -> None:
        """Withdraw the instance (goodbye packets); idempotent, and every caller waits for it."""
        async with self._withdrawing:
            if self._withdrawn:
                return
            self._withdrawn = True
            await self._unregister()

    async def _unregister(self) -> None:
        registered = self._registered
        if registered is not None:
            if not registered.done():
                registered.cancel()
            await asyncio.wait([registered])
            if registered.cancelled():
                return  # never announced: nothing to withdraw
        try:
            goodbyes = await self._zc.async_unregister_service(self._info)
            await goodbyes
        except Exception:  # noqa: BLE001 - a goodbye that fails must not stop the worker's shutdown; logged
            _log.exception("could not withdraw this worker from the LAN")

    async def close(self) -> None:
        """Withdraw, then close the zeroconf sockets."""
        await self.withdraw()
        await self._zc.async_close()


class LanDiscovery:
    """Workers found on the LAN by zeroconf DNS-SD (``worker_main --discovery lan``).

    Args:
        interfaces: Addresses of the interfaces to browse on (default: all).
        service_type: The DNS-SD type (default ``_leakypool._tcp.local.``).
    """

    def __init__(self, *, interfaces: Sequence[str] = (), service_type: str = SERVICE_TYPE) -> None:
        self.interfaces: tuple[str, ...] = tuple(interfaces)
        self.service_type = service_type

    def __repr__(self) -> str:
        return f"LanDiscovery(interfaces={list(self.interfaces)!r}, service_type={self.service_type!r})"

    async def subscribe(self) -> AsyncIterator[DiscoveryEvent]:
        """Workers on the LAN now (as the browser finds them), then changes."""
        loop = asyncio.get_running_loop()
        changes: asyncio.Queue[tuple[str, ServiceStateChange]] = asyncio.Queue()

        def on_change(zeroconf: object, service_type: str, name: str, state_change: ServiceStateChange) -> None:
            loop.call_soon_threadsafe(changes.put_nowait, (name, state_change))

        zc = AsyncZeroconf(interfaces=_interfaces(self.interfaces), ip_version=IPVersion.V4Only)
        browser = AsyncServiceBrowser(zc.zeroconf, self.service_type, handlers=[on_change])
        known: dict[str, WorkerMetadata] = {}
        try:
            while True:
                name, change = await changes.get()
                if change is ServiceStateChange.Removed:
                    worker = known.pop(name, None)
                    if worker is not None:
                        yield DiscoveryEvent("dropped", worker)
                    continue
                worker = await self._resolve(zc, name)
                if worker is None:
                    continue
                kind: EventKind = "updated" if name in known else "added"
                if known.get(name) != worker:
                    known[name] = worker
                    yield DiscoveryEvent(kind, worker)
        finally:
            await browser.async_cancel()
            await zc.async_close()

    async def _resolve(self, zc: AsyncZeroconf, name: str) -> WorkerMetadata | None:
        info = AsyncServiceInfo(self.service_type, name)
        if not await info.async_request(zc.zeroconf, RESOLVE_TIMEOUT_MS):
            _log.warning("found %s but could not resolve it", name)
            return None
        try:
            return record_from_info(info)
        except (KeyError, ValueError, TypeError) as exc:
            _log.warning("ignoring %s: malformed record (%s)", name, exc)
            return None


def record_from_info(info: AsyncServiceInfo) -> WorkerMetadata:
    """The worker record a resolved DNS-SD instance describes.

    Raises:
        KeyError, ValueError: a field is missing or malformed.
    """
    props = {k.decode(): (v or b"").decode() for k, v in info.properties.items()}
    addresses = info.parsed_addresses(IPVersion.V4Only)
    if not addresses or not info.port:
        raise ValueError("no address")
    return WorkerMetadata(
        uid=uuid.UUID(props["uid"]),
        address=f"{addresses[0]}:{info.port}",
        pid=int(props.get("pid", "0")),
        version=props.get("version", ""),
        tags=frozenset(t for t in props.get("tags", "").split(",") if t),
        capacity=int(props.get("capacity", "0")),
        tls=props.get("tls") == "1",
        interpreter=props.get("interpreter", ""),
        build=props.get("build", ""),
    )


public(LanDiscovery)
