"""Callables for the executor tests (importable by workers), and `Gate`, which holds a call until the test lets go."""

from __future__ import annotations

import asyncio
import os
import socket
import sys

import pool


def square(x):
    return x * x


def capture(*args, **kwargs):
    return args, kwargs


def fail_at(x, bad):
    if x == bad:
        raise ValueError(f"item {x} is bad")
    return x


def pid():
    return os.getpid()


def die():
    os._exit(3)


def die_init():
    """An initializer that raises (the worker cannot start)."""
    raise RuntimeError("initializer failed on purpose")


class Box:
    """Something to watch with a weakref."""

    def __init__(self, value=0):
        self.value = value

    def get(self):
        return self.value


def make_box(value):
    return Box(value)


async def adouble(x):
    await asyncio.sleep(0)
    return 2 * x


@pool.routine
async def triple(x):
    return 3 * x


async def hold(address, value=None):
    """Report 'started' to ``address`` and wait until the test sends a byte (or closes); return ``value``."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(b"s")
    await writer.drain()
    await reader.read(1)
    writer.close()
    return value


class Gate:
    """A listening socket `hold` calls report to: ``started()`` waits for the next, ``release()`` lets all go."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(30)
        self.address = self._server.getsockname()[:2]
        self._held: list[socket.socket] = []

    def started(self) -> None:
        conn, _ = self._server.accept()
        conn.settimeout(30)
        conn.recv(1)
        self._held.append(conn)

    def release(self) -> None:
        """Let go every call that reported so far, the ones not yet waited for too."""
        self._server.setblocking(False)
        try:
            while True:
                self._held.append(self._server.accept()[0])
        except BlockingIOError:
            pass
        finally:
            self._server.settimeout(30)
        for conn in self._held:
            conn.sendall(b"x")
            conn.close()
        self._held.clear()

    def close(self) -> None:
        self.release()
        self._server.close()

    def __enter__(self) -> Gate:  # noqa: PYI034  # a test helper, never subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


LOADED: dict[str, object] = {}
"""What `load` put here, in the worker (an initializer's state, as a model would be)."""


def load(name: str) -> None:
    """An initializer: load "a model" once per worker."""
    LOADED["model"] = f"{name} in {os.getpid()}"


def model(_: object = None) -> object:
    return LOADED.get("model")


class Stop(BaseException):
    """A BaseException of the user's own (not an Exception)."""


def raise_base(kind: str) -> None:
    """Raise a BaseException that is no Exception: SystemExit, KeyboardInterrupt, CancelledError or `Stop`."""
    errors = {
        "exit": SystemExit(3),
        "interrupt": KeyboardInterrupt(),
        "cancelled": asyncio.CancelledError("the function's own"),
        "stop": Stop(),
    }
    raise errors[kind]


@pool.routine
def nap(seconds: float) -> float:
    """A plain routine that sleeps (its options, such as a timeout, hold through an executor)."""
    import time

    time.sleep(seconds)
    return seconds


def fail_here(message: str) -> None:
    raise LookupError(message)


def unpicklable_result() -> object:
    """Return what cannot cross back (a lock)."""
    import threading

    return threading.Lock()


# -- CPython's failure matrix (Lib/test/test_concurrent_futures/test_deadlock.py), as issue 53 runs it ----------


def _exit_now():
    sys.exit()


def _raise_error(kind):
    raise {"error": RuntimeError, "exit": SystemExit, "interrupt": KeyboardInterrupt}[kind]("raised on purpose")


class ExitAtUnpickle:
    """Raises SystemExit as it is unpickled (on the worker, as an argument)."""

    def __reduce__(self):
        return _exit_now, ()


class RaiseAtPickle:
    """Raises as it is pickled: ``kind`` says what (on the caller, as an argument; on the worker, as a result)."""

    def __init__(self, kind="error"):
        self.kind = kind

    def __reduce__(self):
        _raise_error(self.kind)


class ExitAtResultUnpickle:
    """A result that raises SystemExit as the pool unpickles it (in the pool's loop thread)."""

    def __reduce__(self):
        return _exit_now, ()


def identity(x):
    return x


def make(kind):
    """A result of ``kind``: pickling or unpickling it raises."""
    if kind == "pickle_error":
        return RaiseAtPickle("error")
    if kind == "pickle_exit":
        return RaiseAtPickle("exit")
    return ExitAtResultUnpickle()


def set_event(event):
    """Set a Manager Event (a proxy the caller made) on the worker; return whether it is set there."""
    event.set()
    return event.is_set()


def blas_threads():
    """(OPENBLAS_NUM_THREADS and OMP_NUM_THREADS here, the threads numpy's BLAS runs) in the worker."""
    import numpy  # noqa: F401 - loads the BLAS, which reads the variables
    from threadpoolctl import threadpool_info

    blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return os.environ.get("OPENBLAS_NUM_THREADS"), os.environ.get("OMP_NUM_THREADS"), blas


def rss_mib() -> float:
    """This process's resident memory, MiB (from /proc)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise LookupError("no VmRSS")


def wait_for_file(path: str, timeout: float = 60.0) -> bool:
    """Hold the worker until ``path`` exists (the test's gate): True, or False after ``timeout`` s."""
    import time

    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            return False
        time.sleep(0.005)
    return True


def mark(path: str) -> str:
    """Create ``path``: the call ran."""
    with open(path, "w"):
        pass
    return path


def mark_and_crash(path: str) -> None:
    """Create ``path``, then end the worker at once (as CPython's test_crash_big_data does)."""
    mark(path)
    os._exit(1)
