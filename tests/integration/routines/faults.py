"""Fault objects for the failure matrix: each does its fault when (un)pickled in a given process.

As CPython's ``test_concurrent_futures/test_deadlock.py`` (``ErrorAtPickle``,
``ExitAtUnpickle``, ``CrashAtUnpickle``...): an object carries its fault
into the stage under test. "On a worker" means a process the pool spawned
(it has ``LEAKYPOOL_UID``); the test's own process never does the fault.
"""

from __future__ import annotations

import os
import signal

import pool


def _on_worker() -> bool:
    return "LEAKYPOOL_UID" in os.environ


class FaultError(Exception):
    """The error a fault object raises."""


def do_fault(kind: str, where: str) -> object:
    """Run on unpickling: do ``kind`` if this is the process ``where`` names; else return a plain value."""
    here = "worker" if _on_worker() else "caller"
    if here == where:
        if kind == "error":
            raise FaultError(f"error while unpickling on the {where}")
        if kind == "exit":
            os._exit(3)
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
    return "plain"


class AtUnpickle:
    """Unpickling it in ``where`` ("worker" or "caller") does ``kind`` (error, exit, crash)."""

    def __init__(self, kind: str, where: str) -> None:
        self.kind, self.where = kind, where

    def __reduce__(self):
        return (do_fault, (self.kind, self.where))


class AtPickle:
    """Pickling it on a worker does ``kind`` (exit, crash); elsewhere it pickles as a plain value."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __reduce__(self):
        if _on_worker():
            do_fault(self.kind, "worker")
        return (str, ("plain",))


@pool.routine
async def take(value):
    """Receives ``value`` (unpickled on the worker), returns a plain answer."""
    return "took it"


@pool.routine
async def give(kind, where):
    """Returns a fault object: its pickling (on the worker) or unpickling does the fault."""
    return AtPickle(kind) if where == "worker-pickle" else AtUnpickle(kind, where)
