"""What a worker settles before it serves: its settings checked, and what they decide (no I/O).

    settings ──> load_backpressure ──> the hook (shipped by the pool, or a task count) ──> count_cap
             ──> check_security    (off loopback: mutual TLS, or --insecure)
             ──> check_registry    (a --registry record names an address pools can dial)
             ──> runs_inline       (routines on the main loop, or on a thread of their own)

`_main.main` calls the checks before it starts the loop, so a bad setting
ends the process with one line and status 2 before anything is bound.
"""

from __future__ import annotations

import base64
from typing import Final

from backpressure import AnyOf, BackpressureLike, TaskCountBackpressure

from .._config import WorkerConfig, is_loopback
from .._errors import ConfigError
from .._transport import wire

WILDCARD_HOSTS: Final[frozenset[str]] = frozenset({"0.0.0.0", "::", "[::]", ""})  # noqa: S104 - names the wildcard binds to tell them apart
"""Binds to every address: no one address to publish."""


def load_backpressure(config: WorkerConfig) -> BackpressureLike | None:
    """The hook a pool shipped, else ``TaskCountBackpressure(--max-concurrent-tasks)``.

    Raises:
        ConfigError: the shipped hook cannot be decoded here.
    """
    if config.backpressure:
        try:
            hook = wire.loads(base64.b64decode(config.backpressure), what="the shipped backpressure hook")
        except Exception as exc:  # noqa: BLE001 - any fault unpickling the hook is a bad setting, said in one line
            raise ConfigError(f"LEAKYPOOL_BACKPRESSURE: {exc}") from None
        if not callable(hook):
            raise ConfigError(f"LEAKYPOOL_BACKPRESSURE: expected a callable hook, got {hook!r}")
        return hook
    if config.max_concurrent_tasks:
        return TaskCountBackpressure(config.max_concurrent_tasks)
    return None


def check_registry(config: WorkerConfig) -> None:
    """Refuse a ``--registry`` record that would send pools elsewhere to their own loopback.

    A worker bound to every address (``0.0.0.0``, ``::``) has no single
    address to record; ``--advertise`` says which one pools reach it at.

    Raises:
        ConfigError: ``--registry`` on a wildcard ``--host`` without ``--advertise``.
    """
    if config.registry and not config.advertise and config.host in WILDCARD_HOSTS:
        raise ConfigError(
            f"--registry: --host {config.host or '(empty)'} binds every address and records none a pool can dial; "
            "give --advertise ADDRESS (where pools reach this worker: its pod or host IP)"
        )


def check_security(config: WorkerConfig) -> None:
    """Refuse a non-loopback bind without mutual TLS, unless ``--insecure``.

    TLS alone encrypts; only client certificates (``--tls-client-ca``) keep
    strangers from running code, so off loopback both are required.

    Raises:
        ConfigError: the worker would run code for anyone who reaches its port.
    """
    if is_loopback(config.host) or config.insecure:
        return
    if not config.tls:
        raise ConfigError(
            f"--host {config.host}: a worker off loopback runs code for anyone who reaches it; "
            "give --tls-cert, --tls-key and --tls-client-ca (mutual TLS), or --insecure to accept the risk"
        )
    if not config.tls_client_ca:
        raise ConfigError(
            f"--host {config.host}: TLS without --tls-client-ca lets any client that can connect run code; "
            "give --tls-client-ca (mutual TLS), or --insecure to accept the risk"
        )


def count_cap(hook: BackpressureLike | None) -> int:
    """The task count at which ``hook`` rejects whatever else it sees (its advertised capacity); 0: none known.

    `TaskCountBackpressure(n)` has n; `AnyOf` the lowest cap among its parts (any
    one of them saying no is enough). A worker at that count is full for every
    task until one ends, which is what lets dispatchers skip it until it says "room".
    """
    if isinstance(hook, TaskCountBackpressure):
        return hook.threshold
    if isinstance(hook, AnyOf):
        caps = [cap for cap in map(count_cap, hook.hooks) if cap > 0]
        return min(caps, default=0)
    return 0


def runs_inline(config: WorkerConfig) -> bool:
    """Whether routines run on the main loop (`_overrun`): a worker serving only its pool's unix socket.

    Everything such a worker serves is a stream the watch thread can answer
    while a routine overruns. gRPC, the metrics port and the registry's
    refresh live on the main loop and could not be answered for: a worker
    with any of them runs routines on a thread of their own.
    """
    return bool(config.unix_socket) and config.metrics_port < 0 and not config.registry
