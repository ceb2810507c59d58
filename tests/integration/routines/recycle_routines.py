"""Routines and initializers for the worker set-up and recycling tests (imported by the workers)."""

from __future__ import annotations

import os

import pool

CONFIG: dict[str, object] = {}
"""What the initializer set in this worker."""

HOARD: list[bytearray] = []
"""Memory a routine keeps, to grow its worker."""


class ModelMissing(Exception):
    """An initializer's own error type, to see it come back as the cause."""


def set_config(name: str, size: int = 0) -> None:
    """A plain initializer: note its arguments and the pid it ran in."""
    CONFIG.update(name=name, size=size, pid=os.getpid())


async def set_config_async(name: str) -> None:
    """An async initializer."""
    CONFIG.update(name=name, pid=os.getpid(), kind="async")


def fail_to_load(path: str) -> None:
    """An initializer that raises."""
    raise ModelMissing(f"no model at {path}")


@pool.routine
async def read_config() -> dict[str, object]:
    """What the initializer set here, with the worker's pid."""
    return dict(CONFIG, worker=os.getpid())


@pool.routine
async def worker_pid() -> int:
    return os.getpid()


@pool.routine
async def hoard(mib: int) -> int:
    """Allocate ``mib`` MiB, touch every page and keep it; this worker's pid."""
    block = bytearray(mib * 2**20)
    block[::4096] = b"\x01" * len(block[::4096])
    HOARD.append(block)
    return os.getpid()


def refuse() -> None:
    """An initializer that always raises (for ``--initializer``)."""
    raise ModelMissing("refusing to start")


def load_from(path: str) -> None:
    """An initializer that raises while ``path`` says ``fail`` (to fail a later worker only)."""
    with open(path) as f:
        if f.read().strip() == "fail":
            raise ModelMissing(f"{path} says fail")
    CONFIG.update(loaded=path, pid=os.getpid())


@pool.routine
async def retire_here() -> None:
    """End this worker at once, as a hard timeout would (`retire_now`): its caller sees the worker lost."""
    from pool._worker._recycle import retire_now

    retire_now("timeout")
