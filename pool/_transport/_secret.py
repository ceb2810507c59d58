"""The shared secret a worker on TCP requires of its callers, on loopback too (issue 35).

A loopback port is open to every user of the machine, and reaching a
worker means running code on it (a pickle is code). So a worker serving
gRPC without client certificates requires every call to carry a secret
(gRPC metadata `METADATA_KEY`), compared in constant time. By default the
secret is per user: a random token in a 0600 file in the user's config
directory (`pool._config._settings.default_secret_file`), created by whichever
process needs it first. Every process of that user finds the same file;
other users cannot read it, so they are refused (``UNAUTHENTICATED``).

Both ends use this module: the worker to load or create its secret and
check a call's, the dispatching side (`SecretSource`) to find what to send.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
import stat
from collections.abc import Iterable
from typing import Final

from .._errors import ConfigError

_log = logging.getLogger("leakypool.pool")

METADATA_KEY: Final[str] = "leakypool-secret"
"""The gRPC metadata key a caller's secret travels under (lower case, as gRPC requires)."""

TOKEN_BYTES: Final[int] = 32
"""Random bytes in a created secret (256 bits, written as URL-safe base64)."""


def load_or_create(path: str) -> str:
    """The secret in ``path``, creating the file (0600, in a 0700 directory) if it does not exist.

    Creation is atomic: the token is written to a private temporary file
    which is then hard-linked to ``path``; a link fails if another process
    got there first, and then both read the winner's token. So processes
    racing at first use agree on one secret.

    Raises:
        ConfigError: the file cannot be read or created, is empty, or is
            readable by other users or owned by another user (it would be
            no secret).
    """
    try:
        return read_file(path, strict=True)
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        token = secrets.token_urlsafe(TOKEN_BYTES)
        temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(token + "\n")
            with contextlib.suppress(FileExistsError):  # another process won the race: its token stands
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    except OSError as exc:
        raise ConfigError(f"cannot create the secret file {path}: {exc.strerror or exc}") from None
    try:
        return read_file(path, strict=True)
    except FileNotFoundError:
        raise ConfigError(f"the secret file {path} vanished as it was created") from None


def read_file(path: str, *, strict: bool = False) -> str:
    """The secret in ``path`` (its first line, stripped).

    Args:
        path: The file.
        strict: Refuse a file another user owns or may read (the default
            secret, which this module creates); otherwise only warn (a file
            given explicitly, e.g. a mounted Kubernetes secret).

    Raises:
        FileNotFoundError: there is no such file.
        ConfigError: it cannot be read, is empty, or (``strict``) is not private.
    """
    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            text = f.read(4096).decode("utf-8", "replace")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    exposed = info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    if exposed or info.st_uid != os.getuid():
        problem = (
            f"the secret file {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
            if exposed
            else f"the secret file {path} belongs to uid {info.st_uid}, not this user ({os.getuid()})"
        )
        if strict:
            raise ConfigError(f"{problem}: chmod 600 it (or remove it to have a new one made)")
        _log.warning("%s: other users may learn it", problem)
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise ConfigError(f"the secret file {path} is empty")
    return lines[0].strip()


def presented(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The secret a call carries in its metadata, or None."""
    for key, value in metadata or ():
        if key == METADATA_KEY:
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return None


def matches(expected: str, given: str | None) -> bool:
    """Whether ``given`` is ``expected``, compared in constant time (no timing oracle)."""
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


class SecretSource:
    """What a dispatching process sends to the workers it reaches over TCP.

    An explicit secret, else the file given (read now, so a bad one fails
    at construction), else the user's default file, read when first needed:
    a pool that never dials a TCP worker never touches it, and one that
    dials a worker of its own user finds the file that worker made.

    Args:
        secret: The secret itself (``secret=``, ``LEAKYPOOL_SECRET``); "" for none.
        path: Its file (``secret_file=``, ``LEAKYPOOL_SECRET_FILE``), or "".
        default_path: The user's own secret file, used when neither is given.

    Raises:
        ConfigError: ``path`` cannot be read, or is empty.
    """

    def __init__(self, secret: str = "", path: str = "", *, default_path: str = "") -> None:
        self._where = "the secret given" if secret else f"the secret file {path or default_path}"
        self._value: str | None = secret or None
        if self._value is None and path:
            try:
                self._value = read_file(path)
            except FileNotFoundError:
                raise ConfigError(f"secret_file: no such file {path}") from None
        self._default = "" if self._value is not None else default_path

    def get(self, *, create: bool = False) -> str | None:
        """The secret to send; None when there is none to find.

        Args:
            create: Make the user's default file if it does not exist yet
                (for workers this process starts itself, which must agree).
        """
        if self._value is not None or not self._default:
            return self._value
        try:
            self._value = load_or_create(self._default) if create else read_file(self._default, strict=True)
        except FileNotFoundError:
            return None
        except ConfigError as exc:
            _log.error("%s; workers over TCP will refuse this pool", exc)
            return None
        return self._value

    def describe(self) -> str:
        """Where the secret comes from, for messages (never the secret)."""
        return self._where

    def __repr__(self) -> str:
        return f"SecretSource({self._where!r})"
