"""Files and directories that carry trust: made private by their owner, and refused when they are not (issues 43, 51).

A directory that decides who talks to whom (the local-discovery registry,
the secret's directory, a fleet's socket directory) is only as private as
its mode and owner. One that another user made first (``/tmp`` is
shared), or that another user may write to, lets that user plant a
record, a socket or a secret. So, as OpenSSH does with ``~/.ssh``, each is
checked on every open: it must be a real directory (not a symbolic link),
owned by this user, with no group or other permission bits. Otherwise the
error names the path and the fix.

A file that carries trust but may live in a place the user chose (a SQLite
job store or registry, with its ``-wal`` and ``-shm``; a secret file given
by path) is checked the way PostgreSQL checks its key files: `trusted_file`
refuses one owned by a user other than this one or root, or writable by
group or others, and one in a directory that is (a sticky world-writable
directory such as ``/tmp`` included: another user can create the ``-wal``
there before SQLite does), whether this process created it or found it.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from .._errors import ConfigError

SQLITE_COMPANIONS: Final[tuple[str, ...]] = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database, which carry as much trust as the database itself."""


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


def trusted_file(path: str, *, what: str, companions: tuple[str, ...] = (), follow: bool = False) -> None:
    """Raise unless ``path`` (if it exists), ``path + suffix`` for each companion (if it exists) and the directories
    holding them could have been written by no one but this user and root.

    - The file and each companion: a regular file (not a link), owned by this user or root, not
      writable by group or others.
    - Its directory: owned by this user or root, not writable by group or others (a sticky one neither).
    - The directories above: none writable by group or others unless sticky (without the sticky bit,
      another user could move a directory below it away and put another in its place).

    Args:
        path: The file (it need not exist yet).
        what: What it is, for messages.
        companions: Suffixes of files beside it that carry the same trust (SQLite's ``-wal``...).
        follow: A symbolic link at ``path`` is followed (and its target checked the same way), as a
            mounted Kubernetes secret needs; otherwise a link is refused.

    Raises:
        ConfigError: naming the path, what is wrong, and the fix.
    """
    if follow and os.path.islink(path):
        _trusted_directories(path, what=what)
        return trusted_file(os.path.realpath(path), what=what, companions=companions)
    _trusted_directories(path, what=what)
    for name in (path, *(path + suffix for suffix in companions)):
        try:
            info = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"{what} {name}: cannot read it: {exc.strerror or exc}") from None
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {name} is not a regular file (a link or something else stands there)")
        if info.st_uid not in (os.getuid(), 0):
            raise ConfigError(
                f"{what} {name} belongs to uid {info.st_uid}, neither this user ({os.getuid()}) nor root: another "
                f"user may have made it first, to be trusted by this process; remove it, or use a place of your own"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            raise ConfigError(f"{what} {name} is writable by other users (mode {mode:04o}): chmod go-w {name}")


def _trusted_directories(path: str, *, what: str) -> None:
    """The directory holding ``path`` and those above it, checked as `trusted_file` says."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return  # nothing can be made there (opening says so), and nothing planted
    _trusted_directory(directory, what=what, holding=True)
    parent = os.path.dirname(directory)
    while parent != directory:
        _trusted_directory(parent, what=what, holding=False)
        directory, parent = parent, os.path.dirname(parent)


def read_only_filesystem(path: str) -> bool:
    """Whether ``path`` lies on a file system mounted read-only (a mounted Kubernetes secret): no one writes there."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _trusted_directory(path: str, *, what: str, holding: bool) -> None:
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{what}: the directory {path}: {exc.strerror or exc}") from None
    mode = stat.S_IMODE(info.st_mode)
    if holding:
        if info.st_uid not in (os.getuid(), 0):
            raise ConfigError(
                f"{what}: the directory {path} belongs to uid {info.st_uid}, neither this user ({os.getuid()}) nor "
                f"root: its owner could replace what this process trusts there; use a directory of your own"
            )
        if mode & 0o022:
            raise ConfigError(
                f"{what}: the directory {path} is writable by other users (mode {mode:04o}), so another user could "
                f"plant a file there first (a -wal beside a database); use a directory of your own (not /tmp), "
                f"or chmod go-w {path}"
            )
    elif mode & 0o022 and not mode & stat.S_ISVTX:
        raise ConfigError(
            f"{what}: the directory {path} above it is writable by other users (mode {mode:04o}) and not sticky: "
            f"another user could move what lies below it; chmod go-w {path}"
        )
