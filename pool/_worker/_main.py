"""One worker process: config in, server up (unix socket or gRPC), READY out, drain on signal.

``worker_main`` only parses the command line and calls `main`; everything
else is here so it can be tested and reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from backpressure import BackpressureLike

from .._base import EXIT_INIT_FAILED, EXIT_RETIRED, become_worker, new_uid
from .._config import WorkerConfig, default_registry, is_loopback
from .._discovery import LocalPublisher
from .._errors import ConfigError
from .._observe import ObservationServer
from .._transport import INTERPRETER, WorkerMetadata, bind_address, malloc
from .._version import __version__
from ._keys import adopt_authkey, forget_secret, worker_trust
from ._native_threads import cap_native_threads
from ._preflight import check_registry, check_security, count_cap, load_backpressure, runs_inline
from ._recycle import InitializerFailed, load_initializer, report_ready, set_up
from ._service import WorkerService
from ._threads import new_event_loop
from ._unix_server import UnixServer

if TYPE_CHECKING:
    from ._registry import RegistryRecord

_log = logging.getLogger("leakypool.worker")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one worker until it drains; the process exit status.

    Exits with status 2 and one line on stderr for a bad flag or variable,
    `EXIT_INIT_FAILED` if the initializer raised, `EXIT_RETIRED` once recycled.
    """
    become_worker()  # (libraries that would start a pool of their own, such as pool.joblib, ask)
    try:
        config = WorkerConfig.from_argv(sys.argv[1:] if argv is None else argv)
        forget_secret()  # read into the config: gone from the environment before any routine (or initializer) runs
        adopt_authkey(config)
        cap_native_threads(config.max_threads)  # before the initializer, which may load a BLAS
        setup = load_initializer(config)
        hook = load_backpressure(config)
        check_security(config)
        check_registry(config)
    except ConfigError as exc:
        fail(str(exc))
    malloc.tune()
    logging.basicConfig(
        level=config.log_level,
        format="%(asctime)s %(levelname)s leakypool-worker[%(process)d] %(message)s",
    )
    loop = new_event_loop()
    try:
        reason, recycled = loop.run_until_complete(serve(config, hook, setup))
    except ConfigError as exc:
        fail(str(exc))
    except InitializerFailed:
        return EXIT_INIT_FAILED
    finally:
        loop.close()
    _log.info("exited: %s", reason)
    if recycled:
        return EXIT_RETIRED
    return 0


def fail(message: str) -> NoReturn:
    """Print one error line for a start-up failure and exit with status 2."""
    print(f"leakypool-worker: error: {message}", file=sys.stderr)
    raise SystemExit(2)


async def _start_registry(config: WorkerConfig, service: WorkerService, info: dict[str, Any]) -> RegistryRecord | None:
    """The ``--registry`` record, if set (its module, and sqlite3, are imported only then)."""
    if not config.registry:
        return None
    from ._registry import start_registry

    return await start_registry(config, service, info)


async def serve(
    config: WorkerConfig, hook: BackpressureLike | None, setup: tuple[Callable[..., Any], tuple[Any, ...]] | None = None
) -> tuple[str, str]:
    """Serve until drained; returns why the worker stopped, and why it recycled ("" if it did not).

    ``setup``: the initializer and its arguments, called once the server is
    bound and before the worker is published or reports READY.

    Raises:
        InitializerFailed: the initializer raised (reported to the pool; nothing was served).
    """
    uid = config.uid or str(new_uid())
    capacity = count_cap(hook)
    service = WorkerService(
        uid=uid,
        backpressure=hook,
        capacity=capacity,
        idle_timeout=config.idle_timeout,
        max_lifetime=config.max_lifetime,
        hold_slot_while_waiting=config.hold_slot_while_waiting,
        plain_prefetch=config.plain_prefetch,
        build=config.build,
        # (asyncio's debug mode refuses calls into a loop from another thread: no watch there)
        inline=runs_inline(config) and not asyncio.get_running_loop().get_debug(),
    )
    stop_server, port = await _start_server(config, service)
    grace: float | None = None  # the server's, once this worker served: one that never got ready stops at once
    async with contextlib.AsyncExitStack() as undo:  # in reverse, on every path: unpublish, stop serving, close
        undo.push_async_callback(service.aclose)
        undo.push_async_callback(lambda: stop_server(grace))
        service.start()
        if config.insecure and not is_loopback(config.host) and not config.tls_client_ca:
            _log.warning(
                "serving WITHOUT client certificates on %s (--insecure): anyone who reaches this port can run code here",
                bind_address(config.host, port),
            )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _on_signal, service, sig, config.shutdown_grace)
        _watch_lifeline(config.lifeline_fd, service)
        await set_up(config, service, setup)
        info = {
            "uid": uid,
            "port": port,
            "pid": os.getpid(),
            "capacity": capacity,
            "tags": list(config.tags),
            "version": __version__,
            "interpreter": INTERPRETER,
            "build": config.build,
        }
        if config.unix_socket:
            info["unix_socket"] = config.unix_socket
        observation = await _observe(config, service)
        if observation is not None:
            undo.push_async_callback(observation.aclose)
            info["metrics_port"] = observation.port
        try:
            undo.push_async_callback(_publish(config, service, info))
        except OSError as exc:
            raise ConfigError(f"--discovery {config.discovery}: cannot publish this worker: {exc}") from None
        registry = await _start_registry(config, service, info)
        if registry is not None:
            undo.push_async_callback(registry.withdraw)
        report_ready(config.ready_fd, info, service.lifecycle.recycler)
        _log.info(
            "ready: uid=%s address=%s capacity=%s tls=%s tags=%s discovery=%s",
            uid,
            f"unix:{config.unix_socket}" if config.unix_socket else bind_address(config.host, port),
            capacity or "unlimited",
            config.tls,
            ",".join(config.tags) or "-",
            config.discovery,
        )
        grace = 1.0
        await service.done.wait()
    return service.exit_reason, service.lifecycle.recycled


async def _start_server(
    config: WorkerConfig, service: WorkerService
) -> tuple[Callable[[float | None], Awaitable[None]], int]:
    """Serve ``service`` where the config says; returns how to stop the server, and its TCP port (0 on a unix socket).

    A unix socket gets the framed protocol (`_unix_server`); a host and
    port get the gRPC service, with TLS when configured.

    Raises:
        ConfigError: the address cannot be bound, or the TLS files read.
    """
    if config.unix_socket:
        unix = UnixServer(service, config.unix_socket, worker_trust(config))
        try:
            await unix.start()
        except OSError as exc:
            raise ConfigError(f"--unix-socket: cannot bind {config.unix_socket}: {exc}") from None

        async def stop_unix(grace: float | None) -> None:
            await unix.aclose()  # the streams have ended by now (the drain ended them)

        return stop_unix, 0
    from . import _grpc_server  # grpc loads only for a worker that serves it

    return await _grpc_server.start(config, service)


async def _observe(config: WorkerConfig, service: WorkerService) -> ObservationServer | None:
    """Serve this worker's ``/metrics`` and ``/status`` on loopback if ``--metrics-port`` asks for it."""
    if config.metrics_port < 0:
        return None
    from ._metrics import WorkerMetrics

    service.metrics = metrics = WorkerMetrics(service.state)

    async def status() -> dict[str, Any]:
        s = service.state()
        return {
            "uid": s.uid,
            "pid": s.pid,
            "version": s.version,
            "interpreter": s.interpreter,
            "build": s.build,
            "accepting": s.accepting,
            "in_flight": s.in_flight,
            "capacity": s.capacity,
            "waiting": s.waiting,
            "idle_s": round(s.idle_seconds, 3),
            "uptime_s": round(s.uptime_seconds, 3),
            "memory_bytes": s.memory_bytes,
            "memory_fraction": round(s.memory_fraction, 4),
            "loop_lag_s": round(s.loop_lag_seconds, 4),
            "latency_p99_s": round(s.latency_p99_seconds, 6),
        }

    observation = ObservationServer(metrics.exposition, status, token=config.metrics_token, names=config.metrics_names)
    try:
        await observation.start(config.metrics_host, config.metrics_port)
    except OSError as exc:
        raise ConfigError(f"--metrics-port: cannot bind {config.metrics_host}:{config.metrics_port}: {exc}") from None
    _log.info("metrics on http://%s:%d/metrics", config.metrics_host, observation.port)
    return observation


def _publish(config: WorkerConfig, service: WorkerService, info: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    """Publish this worker as ``--discovery`` says; withdraw it when it drains.

    Returns what to await before exiting (the withdrawal, finished).
    """
    local_host = "127.0.0.1" if config.host in ("0.0.0.0", "::", "") else config.host  # noqa: S104 - tells a wildcard bind apart, binds nothing
    worker = WorkerMetadata(
        uid=uuid.UUID(info["uid"]),
        address=bind_address(config.advertise or local_host, info["port"]),
        pid=info["pid"],
        version=info["version"],
        tags=frozenset(config.tags),
        capacity=info["capacity"],
        tls=config.tls,
        interpreter=INTERPRETER,
        build=config.build,
    )
    if config.discovery == "local":
        entry = LocalPublisher(config.local_registry or default_registry(), worker)
        service.lifecycle.on_drain(entry.withdraw)

        async def remove() -> None:
            entry.withdraw()

        return remove
    if config.discovery == "lan":
        from .._discovery import LanPublisher, advertised_addresses

        publisher = LanPublisher(
            worker,
            advertised_addresses(config.host, config.advertise),
            info["port"],
            interfaces=config.interfaces,
            service_type=config.service_type,
        )
        publisher.start(
            service.tasks, on_published=service.lifecycle.restart_idle_clock
        )  # idle counts from discoverability
        service.lifecycle.on_drain(lambda: service.tasks.spawn(publisher.withdraw(), name="withdraw from the LAN"))
        return publisher.close

    async def nothing() -> None:
        return None

    return nothing


def _on_signal(service: WorkerService, sig: int, grace: float) -> None:
    name = signal.Signals(sig).name
    if service.exit_reason:
        _log.info("%s while draining (%s): in-flight calls get at most %.1fs more", name, service.exit_reason, grace)
    else:
        _log.info("%s: draining (grace %.1fs)", name, grace)
    service.drain(name, grace)


def _watch_lifeline(fd: int, service: WorkerService) -> None:
    """Exit when the pool that spawned us dies (its end of the pipe closes)."""
    if fd < 0:
        return
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            data = os.read(fd, 1024)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(fd)
            os.close(fd)
            service.drain("the pool that spawned this worker went away", 0.0)

    loop.add_reader(fd, readable)
