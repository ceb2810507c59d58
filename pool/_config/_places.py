"""Where a user's own files live: the local-discovery registry and the workers' secret (per user, found without configuration)."""

from __future__ import annotations

import os
import pwd
import tempfile
from collections.abc import Mapping

from ._parse import PREFIX


def default_registry(environ: Mapping[str, str] = os.environ) -> str:
    """The local-discovery registry when none is given.

    ``LEAKYPOOL_LOCAL_REGISTRY`` if set (workers and pools read the same
    variable), else a per-user directory under the runtime or temp dir
    (which both sides make 0700 and refuse when it is not private: in a
    shared ``/tmp`` another user may have made it first).
    """
    if environ.get(PREFIX + "LOCAL_REGISTRY"):
        return environ[PREFIX + "LOCAL_REGISTRY"]
    base = environ.get("XDG_RUNTIME_DIR") or environ.get("TMPDIR") or tempfile.gettempdir()
    return os.path.join(base, f"leakypool-{os.getuid()}")


def default_secret_file(environ: Mapping[str, str] = os.environ) -> str:
    """This user's own secret for workers on TCP: ``leakypool/secret`` in the user's config directory.

    ``$XDG_CONFIG_HOME`` if it is an absolute path this user owns (or that
    does not exist yet), else ``~/.config`` of the account (from the
    password database, not ``$HOME``, which ``sudo`` may keep). The config
    directory, not the runtime one: it is the same for a login shell, cron,
    a systemd service and after a logout, so every process of one user
    finds one secret.
    """
    base = environ.get("XDG_CONFIG_HOME", "")
    if not (os.path.isabs(base) and _own_or_absent(base)):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:  # an arbitrary uid (a container) has no entry
            home = os.path.expanduser("~")
        base = os.path.join(home, ".config")
    return os.path.join(base, "leakypool", "secret")


def _own_or_absent(path: str) -> bool:
    try:
        return os.stat(path).st_uid == os.getuid()
    except FileNotFoundError:
        return True
