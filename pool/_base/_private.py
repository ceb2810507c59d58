"""Directories that carry trust: made 0700 by their owner, and refused when they are not private (issue 43).

A directory that decides who talks to whom (the local-discovery registry,
the secret's directory, a fleet's socket directory) is only as private as
its mode and owner. One that another user made first (``/tmp`` is
shared), or that another user may write to, lets that user plant a
record, a socket or a secret. So, as OpenSSH does with ``~/.ssh``, each is
checked on every open: it must be a real directory (not a symbolic link),
owned by this user, with no group or other permission bits. Otherwise the
error names the path and the fix.
"""

from __future__ import annotations

import os
import stat

from .._errors import ConfigError


def private_directory(path: str, *, what: str, create: bool = True) -> str:
    """``path``, made (mode 0700, parents too) if missing and ``create``, checked private either way.

    Raises:
        ConfigError: it cannot be made, is not a directory, belongs to
            another user, or group or others have any permission on it.
    """
    if create:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"{what} {path}: cannot create it: {exc.strerror or exc}") from None
    check_private(path, what=what)
    return path


def private_file(path: str) -> None:
    """Create the file at ``path`` with mode 0600 if it does not exist (whatever the umask); leave one that does.

    For SQLite databases this process creates (a job store, a registry):
    SQLite makes their ``-wal`` and ``-shm`` files with the database's own
    mode, so those are 0600 too.

    Raises:
        OSError: it cannot be created (the caller's open then says why).
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return
    os.fchmod(fd, 0o600)  # (the umask cannot take bits away from 0600 that matter; fchmod states it)
    os.close(fd)


def check_private(path: str, *, what: str) -> None:
    """Raise unless ``path`` is a directory of this user's that no one else may enter, list or write.

    Raises:
        ConfigError: naming the path and what to do.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"{what} {path}: cannot read it: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{what} {path} is not a directory (a link or a file stands there): remove it")
    if info.st_uid != os.getuid():
        raise ConfigError(
            f"{what} {path} belongs to uid {info.st_uid}, not this user ({os.getuid()}): another user made it "
            f"first; remove it (as root: rm -rf {path}) or point this process elsewhere"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise ConfigError(f"{what} {path} is open to other users (mode {mode:04o}): chmod 700 {path}")
