"""What a worker proves itself with, and whom it lets in (issue 43).

Every connection to a worker, on its unix socket or over TCP, opens with
the handshake (`pool._transport._handshake`), so every worker holds a
secret: ``LEAKYPOOL_SECRET`` (a pool gives the workers it spawns a key of
its own this way; a provisioner passes the pool's), else ``--secret-file``,
else this user's own (made on first use). Client certificates (mutual
TLS) no longer stand in for it: they say which hosts may connect, the
secret says who may run code. The variable is read at start and removed
from the environment before any routine runs.
"""

from __future__ import annotations

import os

from .._config import WorkerConfig, default_secret_file
from .._errors import ConfigError
from .._transport import Keyring, Seal, SecretSource, Trust, trusted_uids


def worker_secrets(config: WorkerConfig) -> SecretSource:
    """Where the worker's secrets come from: ``LEAKYPOOL_SECRET``, else ``--secret-file``, else this user's own.

    Raises:
        ConfigError: the secret file cannot be read or made, or is not private, or holds none.
    """
    if config.secret:
        source = SecretSource(config.secret)
    elif config.secret_file:
        source = SecretSource(path=config.secret_file)
    else:
        source = SecretSource(default_path=default_secret_file())
    if not source.secrets(create=True):
        raise ConfigError(f"no secret to prove this worker with: {source.describe()} holds none")
    return source


def worker_trust(config: WorkerConfig) -> Trust:
    """The worker's keys and the uids it lets connect (its own, plus ``--peer-uids``).

    Raises:
        ConfigError: the secret file cannot be read or made, or is not private.
    """
    source = worker_secrets(config)
    return Trust(Keyring((), source, create=not (config.secret or config.secret_file)), trusted_uids(config.peer_uids))


def worker_seal(config: WorkerConfig) -> Seal:
    """What the worker seals its registry record with (the pools that admit it check it with their secret).

    Raises:
        ConfigError: as `worker_secrets`.
    """
    source = worker_secrets(config)
    return Seal(lambda: source.secrets(create=not (config.secret or config.secret_file)), source.describe())


def forget_secret() -> None:
    """Remove ``LEAKYPOOL_SECRET`` (and the pool's multiprocessing authkey) from this process's environment:
    routines, and their children, see them no more."""
    os.environ.pop("LEAKYPOOL_SECRET", None)
    os.environ.pop("LEAKYPOOL_MP_AUTHKEY", None)


def adopt_authkey(config: WorkerConfig) -> None:
    """Take the spawning pool's multiprocessing authkey (``LEAKYPOOL_MP_AUTHKEY``), so the ``Manager()``
    proxies its caller sends work here (issue 53); a worker started by hand keeps its own."""
    if config.mp_authkey:
        import multiprocessing.process

        multiprocessing.process.current_process().authkey = bytes.fromhex(config.mp_authkey)
