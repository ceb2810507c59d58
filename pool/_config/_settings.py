"""Settings from flags and ``LEAKYPOOL_*`` variables: the only reader of ``os.environ``.

Each setting is declared once, in a `Setting` table, and from that table
come the command-line flags, the environment variables, the validation
and docs/configuration.md's table. An explicit argument beats the environment, which
beats the default. A bad value raises `ConfigError` naming the flag or
variable, what was expected and what was given; ``worker_main`` turns that
into exit status 2 and one line.

A pool passes settings to the workers it spawns through ``env=``
(`WorkerConfig.to_env`), and the worker parses them with this same code.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from .._errors import ConfigError
from ._parse import (
    Setting,
    boolean,
    build_id,
    choice,
    dns_sd_type,
    hex_text,
    import_path,
    integer,
    ipv4_list,
    is_loopback,
    path_or_empty,
    positive_seconds,
    resolve,
    seconds,
    secret_text,
    size_bytes,
    size_or_zero,
    store_url,
    tag_list,
    text,
    to_env,
    uid_list,
    uid_or_empty,
)

PLAIN_PREFETCH: Final[int] = 8
"""Plain calls a busy worker holds, accepted behind the one it runs. Measured at 1, 2, 4, 8 (docs/performance.md): 8
is the fastest on each plain workload ((q) chunksize 1: 1.4-1.5x ProcessPoolExecutor; 2: 1.0-1.1x), and a call
behind a long one does not stay there while another worker is idle: that worker asks it back (`CallPath.feed_idle`)."""

WORKER_SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("host", text, "an address", "127.0.0.1", "address to bind; non-loopback needs TLS or --insecure"),
    Setting("port", integer(0, 65535), "an integer in 0..65535", 0, "port to bind; 0 picks a free one"),
    Setting(
        "unix_socket",
        text,
        "a socket path",
        "",
        "serve on this unix socket instead of --host/--port, with framed messages instead of gRPC (a pool's own workers do)",
    ),
    Setting(
        "metrics_port",
        integer(-1, 65535),
        "an integer in -1..65535",
        -1,
        "serve /metrics and /status on 127.0.0.1:PORT (0: any free port; -1: off)",
    ),
    Setting("tags", tag_list, "comma-separated tags without spaces", (), "tags a pool can select workers by", True),
    Setting(
        "build",
        build_id,
        "a build id (printable, no spaces)",
        "",
        "the build of the code this worker runs (a git commit, an image tag): it runs calls of that build and calls that name none (docs/concepts.md, rolling deploys)",
    ),
    Setting(
        "max_concurrent_tasks",
        integer(0),
        "an integer >= 0",
        1,
        "tasks run at once before new ones are rejected (RESOURCE_EXHAUSTED); 0 = no limit",
    ),
    Setting("idle_timeout", seconds, "seconds >= 0", 0.0, "exit after this long with nothing in flight; 0 = never"),
    Setting("max_lifetime", seconds, "seconds >= 0", 0.0, "stop accepting after this age, finish, exit; 0 = never"),
    Setting(
        "shutdown_grace", seconds, "seconds >= 0", 30.0, "on SIGTERM/SIGINT/Stop, time in-flight tasks get to finish"
    ),
    Setting(
        "initializer",
        import_path,
        "module:function",
        "",
        "call this once before the first call (its module must be importable here); raising stops the worker",
    ),
    Setting(
        "max_tasks",
        integer(0),
        "an integer >= 0",
        0,
        "recycle after this many calls (drawn once in [N, 1.1 N]): stop accepting, finish, exit; 0 = never",
    ),
    Setting(
        "plain_prefetch",
        integer(0),
        "an integer >= 0",
        PLAIN_PREFETCH,
        "plain calls accepted to wait behind the running one (0: a busy worker turns them away)",
    ),
    Setting(
        "max_memory",
        size_or_zero,
        "a size in bytes (e.g. 536870912, 512MiB, 2GiB, 500MB)",
        0,
        "recycle once a call leaves the worker this much above its resident memory when ready; 0 = never",
    ),
    Setting(
        "max_threads",
        integer(0),
        "an integer >= 0",
        0,
        "native threads (BLAS, OpenMP) the worker's libraries may use; OMP_NUM_THREADS and the like, when set, win; 0 = leave them alone",
    ),
    Setting(
        "discovery", choice("none", "lan", "local"), "one of none, lan, local", "none", "where to publish this worker"
    ),
    Setting(
        "advertise", text, "an address", "", "address to publish (default: the bound host, or this host's addresses)"
    ),
    Setting(
        "interfaces",
        ipv4_list,
        "comma-separated IPv4 addresses",
        (),
        "interfaces for LAN discovery (default: all)",
        True,
    ),
    Setting(
        "local_registry", text, "a directory path", "", "directory for --discovery local (default: per-user temp dir)"
    ),
    Setting(
        "service_type",
        dns_sd_type,
        "a DNS-SD type like _name._tcp.local.",
        "_leakypool._tcp.local.",
        "DNS-SD type for --discovery lan (separate clusters)",
    ),
    Setting("tls_cert", path_or_empty, "a readable file", "", "PEM certificate chain this worker presents"),
    Setting("tls_key", path_or_empty, "a readable file", "", "PEM private key of --tls-cert"),
    Setting("tls_client_ca", path_or_empty, "a readable file", "", "PEM CA that client certificates must chain to"),
    Setting(
        "insecure", boolean, "a boolean (1/0, true/false)", False, "allow a non-loopback bind without TLS (dangerous)"
    ),
    Setting(
        "log_level",
        choice("DEBUG", "INFO", "WARNING", "ERROR"),
        "one of DEBUG, INFO, WARNING, ERROR",
        "INFO",
        "logging threshold",
    ),
    Setting("uid", uid_or_empty, "a UUID", "", "this worker's uid (default: a new time-ordered one)"),
    Setting(
        "hold_slot_while_waiting",
        boolean,
        "a boolean (1/0, true/false)",
        False,
        "count a task that awaits a nested routine call against --max-concurrent-tasks",
    ),
    Setting(
        "metrics_host",
        text,
        "an address",
        "127.0.0.1",
        "address --metrics-port binds (the page, /metrics, /status); off loopback needs --metrics-token",
    ),
    Setting(
        "metrics_token",
        secret_text,
        "a token, @FILE or env:NAME holding one",
        "",
        "required of every request to --metrics-port (Authorization: Bearer TOKEN or ?token=); @FILE or env:NAME keeps it off the command line, which every user can read",
    ),
    Setting(
        "metrics_names",
        tag_list,
        "comma-separated host names",
        (),
        "names (besides IP addresses and localhost) a request to --metrics-port may give as its Host",
        True,
    ),
    Setting(
        "registry",
        store_url,
        "a registry URL (postgresql://... or sqlite:///PATH), @FILE or env:NAME holding one",
        "",
        "record this worker in this store, for pool.StoreDiscovery (no multicast); a URL with a password: @FILE or env:NAME (a command line is world-readable); empty = off",
    ),
    Setting(
        "registry_ttl",
        positive_seconds,
        "seconds > 0",
        15.0,
        "a --registry record not refreshed for this long expires (the worker refreshes it 3 times as often)",
    ),
    Setting(
        "store_retry",
        seconds,
        "seconds >= 0",
        10.0,
        "how long --registry waits at start for a registry out of reach (a database restarting), a log line per back-off; 0 = one try",
    ),
    Setting(
        "secret_file",
        path_or_empty,
        "a readable file",
        "",
        "file holding the secret(s) every caller must prove it holds, one per line (default: this user's own, made on first use)",
    ),
    Setting(
        "no_secret",
        boolean,
        "a boolean (1/0, true/false)",
        False,
        "removed (issue 43): every connection proves the secret; refused with an error",
    ),
    Setting(
        "peer_uids",
        uid_list,
        "comma-separated user ids",
        (),
        "local users besides this worker's own that may connect (unix socket, loopback)",
        True,
    ),
)
"""Everything ``worker_main`` accepts, as flags and as ``LEAKYPOOL_*`` variables."""

WORKER_ENV_ONLY: Final[tuple[Setting, ...]] = (
    Setting(
        "secret",
        text,
        "a token",
        "",
        "the secret itself, instead of --secret-file (a variable only: every user can read a command line)",
    ),
    Setting(
        "mp_authkey",
        hex_text,
        "hex bytes",
        "",
        "internal: the spawning process's multiprocessing authkey, so its Manager proxies work in workers (a variable only)",
    ),
)
"""Settings read only from ``LEAKYPOOL_*`` variables, never from flags."""

WORKER_INTERNAL: Final[tuple[Setting, ...]] = (
    Setting("ready_fd", integer(-1), "a file descriptor", -1, "internal: write the READY line here"),
    Setting("lifeline_fd", integer(-1), "a file descriptor", -1, "internal: exit when this pipe closes"),
    Setting("backpressure", text, "a pickled hook", "", "internal: the hook a pool ships (base64 cloudpickle)"),
    Setting(
        "initializer_file",
        text,
        "a file path",
        "",
        "internal: (initializer, initargs) a pool ships, pickled in a file of its private directory",
    ),
)
"""Settings a spawning pool passes; hidden from ``--help``."""


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """One worker's settings (see `WORKER_SETTINGS` for each field's meaning)."""

    host: str = "127.0.0.1"
    port: int = 0
    unix_socket: str = ""
    metrics_port: int = -1
    tags: tuple[str, ...] = ()
    build: str = ""
    max_concurrent_tasks: int = 1
    idle_timeout: float = 0.0
    max_lifetime: float = 0.0
    shutdown_grace: float = 30.0
    initializer: str = ""
    max_tasks: int = 0
    plain_prefetch: int = PLAIN_PREFETCH
    max_memory: int = 0
    max_threads: int = 0
    discovery: str = "none"
    advertise: str = ""
    interfaces: tuple[str, ...] = ()
    local_registry: str = ""
    service_type: str = "_leakypool._tcp.local."
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    insecure: bool = False
    log_level: str = "INFO"
    uid: str = ""
    hold_slot_while_waiting: bool = False
    metrics_host: str = "127.0.0.1"
    metrics_token: str = ""
    metrics_names: tuple[str, ...] = ()
    registry: str = ""
    registry_ttl: float = 15.0
    store_retry: float = 10.0
    secret_file: str = ""
    no_secret: bool = False
    peer_uids: tuple[int, ...] = ()
    ready_fd: int = -1
    lifeline_fd: int = -1
    backpressure: str = ""
    initializer_file: str = ""
    secret: str = dataclasses.field(default="", repr=False)
    mp_authkey: str = dataclasses.field(default="", repr=False)

    @property
    def tls(self) -> bool:
        """Whether the worker serves TLS."""
        return bool(self.tls_cert)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **explicit: Any) -> WorkerConfig:
        """Settings from ``explicit`` values, then ``environ``, then defaults.

        Raises:
            ConfigError: a value is invalid, or settings contradict each other.
        """
        values = resolve(WORKER_SETTINGS + WORKER_INTERNAL + WORKER_ENV_ONLY, explicit, environ)
        return cls(**values).validated()

    @classmethod
    def from_argv(cls, argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> WorkerConfig:
        """Settings from command-line flags, then ``environ``, then defaults.

        Raises:
            ConfigError: a flag or variable is invalid (the message names it).
        """
        namespace = worker_parser().parse_args(list(argv))
        explicit = {}
        for setting in WORKER_SETTINGS + WORKER_INTERNAL:
            raw = getattr(namespace, setting.name)
            if raw is None:
                continue
            if setting.repeat:
                explicit[setting.name] = tuple(t for item in raw for t in setting.convert(item, setting.flag))
            else:
                explicit[setting.name] = setting.convert(raw, setting.flag)
        return cls.from_env(environ, **explicit)

    def to_env(self) -> dict[str, str]:
        """``LEAKYPOOL_*`` variables that `from_env` turns back into this config."""
        return to_env(WORKER_SETTINGS + WORKER_INTERNAL + WORKER_ENV_ONLY, dataclasses.asdict(self))

    def validated(self) -> WorkerConfig:
        """Check settings that depend on each other; return self.

        Raises:
            ConfigError: TLS files incomplete.
        """
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("--tls-cert and --tls-key: expected both or neither, got only one")
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("--tls-client-ca: expected --tls-cert and --tls-key too, got neither")
        if self.unix_socket and (self.tls_cert or self.discovery == "lan"):
            raise ConfigError("--unix-socket: serves this host only; drop --tls-cert and --discovery lan")
        if self.no_secret:
            raise ConfigError("--no-secret: removed: every connection proves the secret (docs/lan-security.md)")
        if not (self.metrics_token or is_loopback(self.metrics_host)):
            raise ConfigError(
                f"--metrics-host: expected a loopback address unless a metrics token is set, got {self.metrics_host!r}"
            )
        return self


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def worker_parser() -> argparse.ArgumentParser:
    """The ``leakypool-worker`` command line (flags only; values parsed later)."""
    parser = _OneLineParser(
        prog="leakypool-worker",
        description=(
            "Start one leakypool worker: a gRPC server that runs routines shipped to it. "
            "Every flag also reads LEAKYPOOL_<FLAG> (e.g. --max-concurrent-tasks reads "
            "LEAKYPOOL_MAX_CONCURRENT_TASKS); a flag beats the variable. Reaching a worker's "
            "port means running code on it: off loopback, use TLS with client certificates."
        ),
    )
    for setting in WORKER_SETTINGS:
        default = ",".join(setting.default) if isinstance(setting.default, tuple) else setting.default
        help_text = f"{setting.help} [env {setting.env}; default {default!r}]"
        if setting.parse is boolean:
            parser.add_argument(setting.flag, dest=setting.name, action="store_const", const="1", help=help_text)
        elif setting.repeat:
            parser.add_argument(setting.flag, dest=setting.name, action="append", metavar="VALUE", help=help_text)
        else:
            parser.add_argument(setting.flag, dest=setting.name, metavar="VALUE", help=help_text)
    for setting in WORKER_INTERNAL:
        parser.add_argument(setting.flag, dest=setting.name, help=argparse.SUPPRESS)
    return parser


def secret_settings(
    secret: str | None = None, secret_file: str | None = None, environ: Mapping[str, str] | None = os.environ
) -> tuple[str, str]:
    """A dispatching side's ``(secret, secret_file)``: explicit, else ``LEAKYPOOL_SECRET`` / ``_SECRET_FILE``, else "".

    For what talks to workers outside a pool (`StaticDiscovery`'s probe).

    Raises:
        ConfigError: the file is not readable.
    """
    table = [s for s in POOL_SETTINGS if s.name in ("secret", "secret_file")]
    values = resolve(table, {"secret": secret, "secret_file": secret_file}, environ)
    return values["secret"], values["secret_file"]


POOL_SETTINGS: Final[tuple[Setting, ...]] = (
    Setting(
        "build",
        build_id,
        "a build id (printable, no spaces)",
        "",
        "the build of the code this process runs: its calls and pinned jobs run only on workers of that build, and its spawned workers run it (default: none, any worker)",
    ),
    Setting(
        "spawn",
        integer(0),
        "an integer >= 0",
        None,
        "local workers a pool starts (default: one per CPU; none with discovery)",
    ),
    Setting(
        "startup_timeout", positive_seconds, "seconds > 0", 30.0, "how long a pool waits for a spawned worker's READY"
    ),
    Setting(
        "shutdown_grace",
        seconds,
        "seconds >= 0",
        10.0,
        "on pool exit, time in-flight calls get before workers are killed",
    ),
    Setting("queue_depth", integer(0), "an integer >= 0", 0, "calls that may wait for a worker; 0 = fail at once"),
    Setting("admission_timeout", seconds, "seconds >= 0", 0.3, "how long a call waits for a place in a full queue"),
    Setting(
        "dispatch_deadline",
        positive_seconds,
        "seconds > 0",
        300.0,
        "how long a call may wait (limits, queue) before it starts",
    ),
    Setting(
        "max_pending",
        integer(1),
        "an integer >= 1",
        None,
        "calls admitted at once, running + waiting (default: no ceiling)",
    ),
    Setting(
        "max_workers",
        integer(0),
        "an integer >= 0",
        None,
        "local workers a pool may grow to under load (default: spawn)",
    ),
    Setting("idle_timeout", seconds, "seconds >= 0", 30.0, "a worker grown under load exits after this long idle"),
    Setting(
        "hold_slot_while_waiting",
        boolean,
        "a boolean (1/0, true/false)",
        False,
        "spawned workers count a task awaiting a nested call against backpressure",
    ),
    Setting(
        "store",
        store_url,
        "a store URL (sqlite:///PATH or postgresql://...), @FILE or env:NAME holding one",
        "",
        "job store for durable jobs (routine.submit); empty = no store",
    ),
    Setting(
        "lease_ttl",
        positive_seconds,
        "seconds > 0",
        10.0,
        "a dispatching process's job lease; its jobs are re-queued this long after it dies",
    ),
    Setting(
        "worker_template",
        boolean,
        "a boolean (1/0, true/false)",
        True,
        "fork spawned workers from one preloaded template process (off: a fresh interpreter each)",
    ),
    Setting(
        "template_fork",
        boolean,
        "a boolean (1/0, true/false)",
        True,
        "fork the worker template from the pool's own process when it runs no other thread and is under 256 MiB resident (nothing to import again); off, or otherwise: a fresh interpreter",
    ),
    Setting(
        "local_transport",
        choice("unix", "tcp"),
        "unix or tcp",
        "unix",
        "how a pool talks to the workers it spawns: a unix socket in a private directory, or TCP on 127.0.0.1",
    ),
    Setting(
        "metrics_port",
        integer(0),
        "an integer >= 0",
        None,
        "serve /metrics and /status on 127.0.0.1:PORT (0: any free port; default: off)",
    ),
    Setting(
        "metrics_host",
        text,
        "an address",
        "127.0.0.1",
        "address metrics_port binds (the page, /metrics, /status); off loopback needs metrics_token",
    ),
    Setting(
        "metrics_token",
        secret_text,
        "a token, @FILE or env:NAME holding one",
        "",
        "required of every request to metrics_port (Authorization: Bearer TOKEN or ?token=)",
    ),
    Setting(
        "metrics_names",
        tag_list,
        "comma-separated host names",
        (),
        "names (besides IP addresses and localhost) a request to metrics_port may give as its Host (DNS rebinding)",
    ),
    Setting(
        "keep_finished",
        seconds,
        "seconds >= 0",
        7 * 86400.0,
        "finished jobs are purged this long after they end (bounded batches, one process at a time); 0 = keep forever",
    ),
    Setting(
        "store_retry",
        seconds,
        "seconds >= 0",
        10.0,
        "how long submit, leasing, state writes and job lookups retry a lost store connection (reconnecting with back-off) before StoreError; 0 = one try",
    ),
    Setting(
        "max_tasks_per_worker",
        integer(1),
        "an integer >= 1",
        None,
        "a worker recycles after this many calls (drawn once per worker in [N, 1.1 N]): stops accepting, finishes, exits, is replaced (default: never)",
    ),
    Setting(
        "plain_prefetch",
        integer(0),
        "an integer >= 0",
        PLAIN_PREFETCH,
        "plain calls a busy worker holds accepted behind the one it runs (0: none; a routine's prefetch=0 opts out)",
    ),
    Setting(
        "max_memory_per_worker",
        size_bytes,
        "a size in bytes (e.g. 536870912, 512MiB, 2GiB, 500MB)",
        None,
        "a worker recycles once a call leaves it this much above its resident memory when it became ready (default: never)",
    ),
    Setting(
        "max_threads_per_worker",
        integer(0),
        "an integer >= 0",
        None,
        "native threads (BLAS, OpenMP) each spawned worker's libraries may use (default: CPUs // workers, as joblib's loky; 0: no cap); OMP_NUM_THREADS and the like, set in this process's environment, win",
    ),
    Setting(
        "provision_timeout",
        positive_seconds,
        "seconds > 0",
        None,
        "a worker asked of the provisioner counts toward max_workers until it joins or this long passes (default 120)",
    ),
    Setting(
        "secret",
        text,
        "a token",
        "",
        "the secret(s) this pool proves itself with to workers it did not spawn (default: read from secret_file)",
    ),
    Setting(
        "secret_file",
        path_or_empty,
        "a readable file",
        "",
        "file holding that secret, one per line (default: this user's own)",
    ),
    Setting(
        "insecure",
        boolean,
        "a boolean (1/0, true/false)",
        False,
        "dial workers off loopback without TLS when the pool has no credentials: anyone on the path can read and change every frame",
    ),
    Setting(
        "peer_uids",
        uid_list,
        "comma-separated user ids",
        (),
        "local users besides this one whose workers this pool may dial (unix socket, loopback)",
    ),
)
"""What ``WorkerPool`` reads from ``LEAKYPOOL_*`` when an argument is not given."""


@dataclasses.dataclass(frozen=True)
class PoolConfig:
    """A pool's settings (see `POOL_SETTINGS` for each field's meaning)."""

    spawn: int | None = None
    startup_timeout: float = 30.0
    shutdown_grace: float = 10.0
    queue_depth: int = 0
    admission_timeout: float = 0.3
    dispatch_deadline: float = 300.0
    max_pending: int | None = None
    max_workers: int | None = None
    idle_timeout: float = 30.0
    hold_slot_while_waiting: bool = False
    store: str = ""
    lease_ttl: float = 10.0
    local_transport: str = "unix"
    worker_template: bool = True
    template_fork: bool = True
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    metrics_token: str = ""
    metrics_names: tuple[str, ...] = ()
    keep_finished: float = 7 * 86400.0
    store_retry: float = 10.0
    provision_timeout: float | None = None
    max_tasks_per_worker: int | None = None
    plain_prefetch: int = PLAIN_PREFETCH
    max_memory_per_worker: int | None = None
    max_threads_per_worker: int | None = None
    build: str = ""
    secret: str = dataclasses.field(default="", repr=False)
    secret_file: str = ""
    insecure: bool = False
    peer_uids: tuple[int, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = os.environ, **explicit: Any) -> PoolConfig:
        """Settings from ``explicit`` arguments, then ``environ`` (None: ignore it), then defaults.

        Raises:
            ConfigError: a variable or argument is invalid (the message names it).
        """
        explicit = dict(explicit)
        for setting in POOL_SETTINGS:
            value = explicit.get(setting.name)
            if isinstance(value, list | tuple | set | frozenset):
                explicit[setting.name] = setting.convert(",".join(map(str, value)), setting.name)
            elif value is not None and not isinstance(value, str):
                _check_explicit(setting, value)
            elif isinstance(value, str) and setting.parse is size_bytes:
                explicit[setting.name] = setting.convert(value, setting.name)  # "512MiB" given in code
        config = cls(**resolve(POOL_SETTINGS, explicit, environ))
        if config.local_transport not in ("unix", "tcp"):
            raise ConfigError(f"local_transport: expected unix or tcp, got {config.local_transport!r}")
        if config.max_workers is not None and config.spawn is not None and config.max_workers < config.spawn:
            raise ConfigError(f"max_workers: expected at least spawn ({config.spawn}), got {config.max_workers}")
        if not (config.metrics_token or is_loopback(config.metrics_host)):
            raise ConfigError(
                f"metrics_host: expected a loopback address unless a metrics token is set, got {config.metrics_host!r}"
            )
        return config

    def to_env(self) -> dict[str, str]:
        """``LEAKYPOOL_*`` variables that `from_env` turns back into this config."""
        values = dataclasses.asdict(self)
        return to_env([s for s in POOL_SETTINGS if values[s.name] is not None], values)


def _check_explicit(setting: Setting, value: Any) -> None:
    """Validate a value given in code by the same rules as its variable."""
    if setting.parse is boolean:
        if not isinstance(value, bool):
            raise ConfigError(f"{setting.name}: expected a bool, got {value!r}")
        return
    if isinstance(value, bool):
        raise ConfigError(f"{setting.name}: expected {setting.expect}, got {value!r}")
    setting.convert(repr(value) if isinstance(value, float) else str(value), setting.name)
