"""Functions the joblib backend tests run in workers (importable by name there)."""

from __future__ import annotations

import os
import time

from joblib import Parallel, delayed


def square(x: int) -> int:
    return x * x


def pid(_: object = None) -> int:
    return os.getpid()


def fail_at(x: int, bad: int) -> int:
    if x == bad:
        raise KeyError(f"item {x}")
    return x


def nested(n: int) -> tuple[list[int], str]:
    """A task that runs joblib itself: the inner Parallel must stay in this worker (threads or sequential)."""
    inner = Parallel(n_jobs=2)(delayed(square)(i) for i in range(n))
    with Parallel(n_jobs=2) as parallel:
        backend = type(parallel._backend).__name__
    return inner, backend


def slow(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def die(_: object = None) -> None:
    os._exit(17)


def nested_leakypool(n: int) -> list[int]:
    """A task that asks for the "leakypool" backend itself: it runs sequentially in this worker."""
    import pool.joblib

    pool.joblib.register()
    with Parallel(n_jobs=2, backend="leakypool") as parallel:
        backend = type(parallel._backend).__name__
        values = parallel(delayed(pid)() for _ in range(n))
    return [backend, len(set(values)), values[0] == os.getpid()]


def kept_callables(_: object = None) -> list[str]:
    """The types of the callables this worker keeps loaded (the executor's cache), after the call that asks."""
    from pool._executor import _calls

    return sorted({type(fn).__name__ for fn in _calls._LOADED.values()})
