"""The secret both ends of every worker connection prove they hold (issues 35 and 43).

A worker runs shipped code, and a pool unpickles what a worker returns,
so each must know the other is genuine. They prove it to each other on
every connection with the secret (`_handshake`: an HMAC over fresh
challenges; the secret itself never crosses the wire). By default the
secret is per user: a random token in a 0600 file in a 0700 directory of
the user's config directory (`pool._config._places.default_secret_file`), created
by whichever process needs it first. Every process of that user finds the
same file; other users cannot read it. A pool gives the workers it spawns
its process's own key instead (`spawn_key`, in their environment).

A file (or ``LEAKYPOOL_SECRET``) may hold several secrets, one per line
(whitespace-separated in a variable): any of them is accepted, the first
is preferred. That is how a secret is rotated without downtime: add the new
one everywhere, then remove the old one (files are re-read when they change).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import time
from typing import Final

from .._errors import ConfigError

_log = logging.getLogger("leakypool.pool")

TOKEN_BYTES: Final[int] = 32
"""Random bytes in a created secret (256 bits, written as URL-safe base64)."""

FILE_MAX_BYTES: Final[int] = 4096
"""The most of a secret file that is read (a few secrets, one per line)."""

RELOAD_S: Final[float] = 1.0
"""How often, at most, a secret file is looked at again for a change (rotation without a restart)."""


_spawn_key: str = ""


def spawn_key() -> str:
    """This process's own secret for the workers its pools spawn (in their environment, never on disk).

    One per process, made on first use: pools of one process may use each
    other's workers (as they could when a private directory was the only
    guard), and no other process holds it.
    """
    global _spawn_key
    if not _spawn_key:
        _spawn_key = secrets.token_urlsafe(TOKEN_BYTES)
    return _spawn_key


def split(text: str) -> tuple[str, ...]:
    """The secrets in ``text``: its non-empty lines or words, in order, without repeats."""
    return tuple(dict.fromkeys(text.split()))


def load_or_create(path: str) -> str:
    """The secrets in ``path`` (one per line), creating the file (0600, in a private 0700 directory) if it does not exist.

    Creation is atomic: the token is written to a private temporary file
    which is then hard-linked to ``path``; a link fails if another process
    got there first, and then both read the winner's token. So processes
    racing at first use agree on one secret.

    Raises:
        ConfigError: the file cannot be read or created, is empty, or is
            readable by other users or owned by another user, or its
            directory is (it would be no secret).
    """
    try:
        return read_file(path, strict=True)
    except FileNotFoundError:
        pass
    directory = os.path.dirname(path) or "."
    from .._base import private_directory

    private_directory(directory, what="the secret's directory")
    try:
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
    """The secrets in ``path`` (one per line, or whitespace-separated), one per line.

    Whoever could write the file decides whom this process trusts, so the
    file and the directories holding it must be writable by no one but this
    user and root (`trusted_file`: a file or directory of another user's,
    or one writable by others, a sticky ``/tmp`` included, is refused),
    on every read, a reload included. A file on a read-only file system
    that root owns (a mounted Kubernetes secret) is accepted with a warning.

    Args:
        path: The file.
        strict: Refuse a file (or a directory holding it) that another user
            may read, too (the default secret, which this module creates);
            otherwise only warn (a file given explicitly).

    Raises:
        FileNotFoundError: there is no such file.
        ConfigError: it cannot be read, is empty, could be written by
            another user, or (``strict``) is not private.
    """
    from .._base import read_only_filesystem, trusted_file

    try:
        with open(path, "rb") as f:
            info = os.fstat(f.fileno())
            text = f.read(FILE_MAX_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    mounted = not strict and info.st_uid == 0 and read_only_filesystem(path)
    if mounted:
        _log.warning("the secret file %s is root's, on a read-only file system (a mounted secret): accepted", path)
    else:
        trusted_file(path, what="the secret file", follow=not strict)
    exposed = info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    if (exposed or info.st_uid != os.getuid()) and not mounted:
        problem = (
            f"the secret file {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):04o})"
            if exposed
            else f"the secret file {path} belongs to uid {info.st_uid}, not this user ({os.getuid()})"
        )
        if strict:
            raise ConfigError(f"{problem}: chmod 600 it (or remove it to have a new one made)")
        _log.warning("%s: other users may learn it", problem)
    if strict:
        from .._base import private_directory

        private_directory(os.path.dirname(path) or ".", what="the secret's directory", create=False)
    found = split(text)
    if not found:
        raise ConfigError(f"the secret file {path} is empty")
    return "\n".join(found)


class SecretSource:
    """The secrets one end holds: given, from a file, or this user's own.

    An explicit secret, else the file given (read now, so a bad one fails
    at construction), else the user's default file, read when first needed:
    a pool that never dials a worker outside its own fleet never touches it,
    and one that dials a worker of its own user finds the file that worker
    made. A file is looked at again (at most every `RELOAD_S`) and re-read
    when it changed, so a rotated secret is picked up without a restart.

    Args:
        secret: The secret itself (``secret=``, ``LEAKYPOOL_SECRET``); "" for none.
            Several, whitespace-separated, are all accepted.
        path: Its file (``secret_file=``, ``LEAKYPOOL_SECRET_FILE``), or "".
        default_path: The user's own secret file, used when neither is given.

    Raises:
        ConfigError: ``path`` cannot be read, or is empty.
    """

    def __init__(self, secret: str = "", path: str = "", *, default_path: str = "") -> None:
        self._where = "the secret given" if secret else f"the secret file {path or default_path}"
        self._fixed = split(secret)
        self._path = "" if secret else path or default_path
        self._strict = not secret and not path
        self._read: tuple[str, ...] = ()
        self._stamp: tuple[int, int, int] | None = None  # (inode, size, mtime) of the file when read
        self._checked = float("-inf")
        if self._path and not self._strict:
            try:
                self._load(read_file(self._path))
            except FileNotFoundError:
                raise ConfigError(f"secret_file: no such file {path}") from None

    def secrets(self, *, create: bool = False) -> tuple[str, ...]:
        """The secrets held now, preferred first; empty when there are none to find.

        Args:
            create: Make the user's default file if it does not exist yet
                (for workers this process starts itself, which must agree).
        """
        if self._fixed or not self._path:
            return self._fixed
        now = time.monotonic()
        if now - self._checked < RELOAD_S and self._read:
            return self._read
        self._checked = now
        try:
            info = os.stat(self._path)
            if self._stamp != (info.st_ino, info.st_size, info.st_mtime_ns) or not self._read:
                self._load(load_or_create(self._path) if create else read_file(self._path, strict=self._strict))
        except FileNotFoundError:
            if create:
                self._load(load_or_create(self._path))
        except ConfigError as exc:
            _log.error("%s; workers will refuse this process (and it them)", exc)
        return self._read

    def get(self, *, create: bool = False) -> str | None:
        """The secrets as one string (for ``LEAKYPOOL_SECRET`` of a worker this pool starts); None if none."""
        found = self.secrets(create=create)
        return " ".join(found) if found else None

    def _load(self, text: str) -> None:
        self._read = split(text)
        with contextlib.suppress(OSError):
            info = os.stat(self._path)
            self._stamp = (info.st_ino, info.st_size, info.st_mtime_ns)

    def describe(self) -> str:
        """Where the secret comes from, for messages (never the secret)."""
        return self._where

    def __repr__(self) -> str:
        return f"SecretSource({self._where!r})"
