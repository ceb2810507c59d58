"""A pool's growth beyond its own fleet: requests to a provisioner, counted until the worker joins.

`Growth` is what the pool's admission and job scheduler call when work
finds no worker with room (``grow``). With the default provisioner that is
the local fleet's own spawn-on-overflow, unchanged. With any other
provisioner, `ProvisionPlan` decides how many workers to request; each
request runs as a task this object owns; a request counts until a worker
with its uid joins (``changed`` reconciles on every membership change) or
``provision_timeout`` passes; a provisioner that raises is logged once per
back-off and counted (``failures``), and the work keeps waiting.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Final

from backpressure import BackpressureLike, TaskCountBackpressure

from .._base import TaskOwner, new_uid, redacted
from .._config import PoolConfig, WorkerConfig
from .._errors import ConfigError
from .._transport import SecretSource, WorkerMetadata, wire
from ._local_fleet import LocalFleet
from ._plan import ProvisionPlan
from ._provision import Provisioner, SubprocessProvisioner, WorkerRequest

_log = logging.getLogger("leakypool.pool")

PROVISION_TIMEOUT_S: Final[float] = 120.0
"""By default, how long a requested worker counts toward ``max_workers`` before it is given up."""

FORWARDED: tuple[str, ...] = ("MAX_CONCURRENT_TASKS", "BACKPRESSURE", "SHUTDOWN_GRACE", "HOLD_SLOT_WHILE_WAITING")
"""Settings of the pool's own workers that provisioned workers get too (``LEAKYPOOL_`` + these)."""

TLS_SETTINGS: Final[tuple[str, ...]] = ("TLS_CERT", "TLS_KEY", "TLS_CLIENT_CA")
"""The worker's certificate, its key and the CA its clients' certificates chain to (``LEAKYPOOL_`` + these),
in the order of a provisioner's ``worker_tls``."""


def worker_request(
    uid: uuid.UUID,
    seq: int,
    spawned_env: Mapping[str, str],
    *,
    registry: str,
    tags: Collection[str],
    idle_timeout: float,
    tls: Sequence[str] = (),
    secret: str | None = None,
) -> WorkerRequest:
    """The request for worker ``uid``: the spawned workers' capacity settings, plus where and how to join.

    Args:
        uid: The uid the worker takes.
        seq: The request number.
        spawned_env: ``LEAKYPOOL_*`` settings of the pool's spawned workers.
        registry: The registry URL the worker records itself in ("" for none); one with a password
            is in ``env`` only (``LEAKYPOOL_REGISTRY``), never in ``args`` (issue 43).
        tags: Tags the pool admits workers by.
        idle_timeout: Seconds the worker idles before it exits.
        tls: The worker's TLS files on its host (cert, key, client CA; see `TLS_SETTINGS`), or empty.
        secret: The secret the worker requires of its callers (this pool's): in ``env`` only
            (``LEAKYPOOL_SECRET``), never in ``args``, which every user of a host can read.
    """
    env = {f"LEAKYPOOL_{k}": spawned_env[f"LEAKYPOOL_{k}"] for k in FORWARDED if spawned_env.get(f"LEAKYPOOL_{k}")}
    env |= {f"LEAKYPOOL_{k}": path for k, path in zip(TLS_SETTINGS, tls, strict=False) if path}
    env |= {"LEAKYPOOL_UID": str(uid), "LEAKYPOOL_IDLE_TIMEOUT": repr(idle_timeout)}
    if registry:
        env["LEAKYPOOL_REGISTRY"] = registry
    if tags:
        env["LEAKYPOOL_TAGS"] = ",".join(sorted(tags))
    args: list[str] = []
    for name, value in env.items():
        if name == "LEAKYPOOL_REGISTRY" and redacted(value) != value:
            continue  # a password: in env only (an argument is world-readable in /proc/PID/cmdline)
        flag = "--" + name.removeprefix("LEAKYPOOL_").lower().replace("_", "-")
        if name == "LEAKYPOOL_HOLD_SLOT_WHILE_WAITING":
            args += [flag] if value == "1" else []
        else:
            args += [flag, value]
    if secret:
        env["LEAKYPOOL_SECRET"] = secret
    return WorkerRequest(uid=uid, env=env, args=tuple(args), seq=seq)


class Growth:
    """Where a pool's extra workers come from when work waits: its fleet, or a provisioner.

    Args:
        fleet: The pool's local fleet.
        provisioner: None or a `SubprocessProvisioner`: the fleet grows
            (today's behaviour); anything else gets `WorkerRequest`s.
        max_workers: Members plus outstanding requests at most.
        provision_timeout: Seconds a request counts before it is given up.
        members: The pool's worker uids now.
        request: Builds the request for a uid and request number.
    """

    def __init__(
        self,
        fleet: LocalFleet,
        provisioner: Provisioner | None,
        *,
        max_workers: int,
        provision_timeout: float,
        members: Callable[[], Collection[uuid.UUID]],
        request: Callable[[uuid.UUID, int], WorkerRequest],
    ) -> None:
        self._fleet = fleet
        self.provisioner: Provisioner = provisioner if provisioner is not None else SubprocessProvisioner()
        self._local = self.provisioner if isinstance(self.provisioner, SubprocessProvisioner) else None
        self._remote = self._local is None
        if self._local is not None:
            self._local.attach(fleet)
        self.plan = ProvisionPlan(max_workers, provision_timeout)
        self._members = members
        self._request = request
        self._tasks = TaskOwner("provisioning", _log)
        self.requested = 0
        self.joined = 0
        self.failures = 0
        self.timeouts = 0

    @property
    def maximum(self) -> int:
        """Workers the pool may have: 0 means it can start none at all."""
        return self.plan.max_workers if self._remote else self._fleet.maximum

    @property
    def grown(self) -> int:
        """Workers started under load: spawned locally, or provisioned and joined."""
        return self._fleet.grown + self.joined

    def grow(self) -> bool:
        """Work found no worker with room: ask for one more if the plan allows; True if asked.

        A `SubprocessProvisioner` is asked at once (`SubprocessProvisioner.grow`:
        the fleet counts its own spawns, so no request is tracked); another
        provisioner gets a `WorkerRequest` in a task this object owns.
        """
        if self._local is not None:
            return self._local.grow()
        if self._tasks.closed:
            return False
        now = time.monotonic()
        for uid in self.plan.expired(now):
            self.timeouts += 1
            _log.warning(
                "requested worker %s has not joined within %.0fs; it no longer counts", uid, self.plan.provision_timeout
            )
        if not self.plan.wanted(now, len(self._members())):
            return False
        uid = new_uid()
        self.plan.requested(uid, now)
        self._tasks.spawn(self._provision(self._request(uid, self.requested)), name=f"provision {uid}")
        self.requested += 1
        return True

    def changed(self) -> None:
        """Membership changed: requested workers that joined stop counting as outstanding."""
        if not self.plan.outstanding:
            return
        for uid in set(self.plan.outstanding).intersection(self._members()):
            if self.plan.joined(uid):
                self.joined += 1
                _log.info("requested worker %s joined", uid)

    async def _provision(self, request: WorkerRequest) -> None:
        try:
            await self.provisioner.provision(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user provisioner's fault counts as a failed request, planned around
            self.failures += 1
            if self.plan.failed(request.uid, time.monotonic()):
                _log.warning(
                    "provisioner %s failed (%s); work keeps waiting, next request in %.0fs",
                    redacted(repr(self.provisioner)),
                    redacted(str(exc)),
                    self.plan.resume_at - time.monotonic(),
                )
            return
        _log.debug("provisioner %s is starting worker %s", redacted(repr(self.provisioner)), request.uid)

    async def aclose(self) -> None:
        """Cancel requests in flight; close the provisioner if it has ``aclose``."""
        await self._tasks.aclose()
        closer: Any = getattr(self.provisioner, "aclose", None)
        if self._remote and closer is not None:
            await closer()


def pool_capacity(
    config: PoolConfig,
    backpressure: BackpressureLike | None,
    provisioner: Provisioner | None,
    *,
    minimum: int,
    provision_timeout: float | None,
    members: Callable[[], Collection[uuid.UUID]],
    registry: str,
    tags: Collection[str],
    on_ready: Callable[[WorkerMetadata], None],
    on_exit: Callable[[uuid.UUID, str], None],
    initializer: tuple[Callable[..., Any], tuple[Any, ...]] | None = None,
    secret: SecretSource | None = None,
    spawn_key: str = "",
) -> tuple[LocalFleet, Growth]:
    """A pool's fleet (``minimum`` local workers, growing locally unless a remote provisioner is given) and its growth.

    A provisioner's optional ``worker_tls`` (cert, key, client CA: paths on
    the worker's host) reaches every request as ``LEAKYPOOL_TLS_*`` and
    ``--tls-*`` (`CommandProvisioner(..., tls=...)` sets it).

    Args:
        config: The pool's settings.
        backpressure: The hook its workers run.
        provisioner: Where extra workers come from (None: the local fleet).
        minimum: Local workers kept.
        provision_timeout: Seconds a request counts until its worker joins (None: `PROVISION_TIMEOUT_S`).
        members: The pool's worker uids now.
        registry: The registry URL provisioned workers record themselves in.
        tags: Tags the pool admits workers by.
        on_ready: Admits a spawned worker.
        on_exit: Evicts a spawned worker that exited.
        initializer: ``(initializer, initargs)`` each spawned worker calls before its first call.
        secret: The pool's secret, which provisioned workers get (``LEAKYPOOL_SECRET``) and require.
        spawn_key: The pool's own key, which its spawned workers get (``LEAKYPOOL_SECRET``) and require.

    Raises:
        SerializationError: the initializer or its arguments cannot be pickled.
        ConfigError: a bad ``provision_timeout``, or a provisioner other than
            `SubprocessProvisioner` with no registry to join through (no `StoreDiscovery`).
    """
    timeout = PROVISION_TIMEOUT_S if provision_timeout is None else provision_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ConfigError(f"provision_timeout: expected seconds > 0, got {provision_timeout!r}")
    remote = provisioner is not None and not isinstance(provisioner, SubprocessProvisioner)
    if remote and not registry:
        raise ConfigError(
            f"provisioner={redacted(repr(provisioner))}: the workers it starts join through a store registry, "
            "and this pool reads none; give discovery=pool.StoreDiscovery(URL)"
        )
    worker_tls = tuple(getattr(provisioner, "worker_tls", None) or ())
    env = worker_env(backpressure, config, spawn_key, workers=minimum)
    ceiling = max(minimum, config.max_workers or 0)
    fleet = LocalFleet(
        env=env,
        minimum=minimum,
        maximum=minimum if remote else ceiling,
        idle_timeout=config.idle_timeout,
        startup_timeout=config.startup_timeout,
        shutdown_grace=config.shutdown_grace,
        on_ready=on_ready,
        on_exit=on_exit,
        transport=config.local_transport,
        template=config.worker_template,
        template_fork=config.template_fork,
        initializer=b"" if initializer is None else wire.dumps(initializer, what=f"initializer {initializer[0]!r}"),
    )

    def request(uid: uuid.UUID, seq: int) -> WorkerRequest:
        return worker_request(
            uid,
            seq,
            env,
            registry=registry,
            tags=tags,
            idle_timeout=config.idle_timeout,
            tls=worker_tls,
            secret=secret.get(create=True) if secret is not None else None,
        )

    growth = Growth(
        fleet,
        provisioner,
        max_workers=ceiling,
        provision_timeout=float(timeout),
        members=members,
        request=request,
    )
    return fleet, growth


def worker_env(
    backpressure: BackpressureLike | None, config: PoolConfig, spawn_key: str = "", *, workers: int = 1
) -> dict[str, str]:
    """Settings for the workers a pool spawns, as ``LEAKYPOOL_*`` variables (``spawn_key``: the secret they require;
    ``workers``: how many the pool keeps, which share the CPUs' native threads)."""
    if isinstance(backpressure, TaskCountBackpressure):
        capacity, shipped = backpressure.threshold, ""
    elif backpressure is None:
        capacity, shipped = 0, ""
    else:
        blob = wire.dumps(backpressure, what=f"backpressure hook {backpressure!r}")
        capacity, shipped = 0, base64.b64encode(blob).decode()
    worker = WorkerConfig(
        max_tasks=config.max_tasks_per_worker or 0,
        plain_prefetch=config.plain_prefetch,
        max_memory=config.max_memory_per_worker or 0,
        max_concurrent_tasks=capacity,
        backpressure=shipped,
        shutdown_grace=config.shutdown_grace,
        hold_slot_while_waiting=config.hold_slot_while_waiting,
        log_level="WARNING",
        secret=spawn_key,  # in the environment only; the worker removes it from there at start
        mp_authkey=_mp_authkey(),
        max_threads=native_threads(config.max_threads_per_worker, workers),
        build=config.build,  # they run this process's code (spawned from it)
    )
    return worker.to_env()


def native_threads(per_worker: int | None, workers: int) -> int:
    """Native threads (BLAS, OpenMP) each spawned worker may use: ``per_worker`` if given, else the CPUs shared
    among the ``workers`` the pool keeps (at least one each), as joblib's loky gives ``cpu_count() // n_jobs``."""
    if per_worker is not None:
        return per_worker
    return max(1, (os.cpu_count() or 1) // max(1, workers))


def _mp_authkey() -> str:
    """This process's multiprocessing authkey (hex), which its spawned workers take as theirs (issue 53).

    A ``multiprocessing.Manager()`` proxy made here authenticates with it, so the workers this
    pool spawns (same host, same user) can use the proxies they are sent, as a
    ``ProcessPoolExecutor``'s children can. It goes in their environment only (never a command
    line), and the worker removes it from there at start.
    """
    import multiprocessing.process  # (about a millisecond, once a pool spawns workers)

    return multiprocessing.process.current_process().authkey.hex()
