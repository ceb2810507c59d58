"""Public names under their public path: what is pickled names ``pool.X``, never the private module it lives in.

A job store keeps pickled routines, options and limits for as long as a job
waits, and a LAN worker may run another release than its pool: a name such
as ``pool._dispatch._limits.Queue`` would break both the day that module
moves. Each module that defines a public name calls `public` on it where it
is defined, so the name is right whatever was imported first (a fix-up in
``pool/__init__`` would run only for names already loaded: they load lazily).
"""

from __future__ import annotations

from typing import Final

PUBLIC_MODULE: Final[str] = "pool"
"""The module every public name is re-exported from (``pool/__init__.py``)."""


def public(*objects: object) -> None:
    """Name ``objects`` (classes and functions re-exported by ``pool``) as members of `PUBLIC_MODULE`."""
    for obj in objects:
        obj.__module__ = PUBLIC_MODULE
