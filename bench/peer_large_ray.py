"""Workload (s) on Ray: large values to a local worker and back, beside the memory floor.

A peer script for ``bench.bench_large`` (same cases, same row format), run in
its own venv, never by the project: it imports only ray, numpy, the
standard library and bench/support/large_cases.py (the cases and floor bench_large
uses; numpy and the standard library only) - not ``pool``, as the project
does not depend on Ray::

    python3 -m venv /tmp/venv-peers2 && /tmp/venv-peers2/bin/pip install ray numpy psutil
    /tmp/venv-peers2/bin/python bench/peer_large_ray.py            # every size
    /tmp/venv-peers2/bin/python bench/peer_large_ray.py --quick    # without 1 GiB

Cases: contiguous float64 arrays of 1, 16, 128 MiB and 1 GiB and 128 MiB of
``bytes``; three calls each: echo (``f(x) -> x``), argument only
(``f(x) -> None``) and result only (``f(n) -> x``, the worker's value made
once per worker process and kept). Each figure is the p50 of 3 calls (7 below
128 MiB) after 1 (2) warm-ups, the same as bench_large; a call is
``ray.get(f.remote(...))`` from the driver, timed until the value is in hand.
The floor is bench_large's: one ``np.copyto`` of N bytes into memory already
touched per direction (two for an echo). Prints one JSON object with
bench_large's keys (``workload``, ``floor``, ``rows``) plus ``ray``; each row
has ``runner: "Ray"``, ``payload``, ``call``, ``mib``, ``p50_ms`` and
``rss_peak_mib``, or ``p50_ms: null`` and ``error`` when a case fails (a call
waits at most ``CALL_TIMEOUT_S``).

How Ray runs here: ``ray.init(num_cpus=2, include_dashboard=False)``, a
single-node Ray with its GCS server, raylet (which holds the shared-memory
object store, sized by Ray: 30% of RAM), monitors and agents, and plain
remote *tasks* (``@ray.remote def``), not actors: tasks are what a Ray user
passes arrays to (``f.remote(x)``), Ray's scheduler picks one of its worker
processes (at most 2 tasks at once), and a result-only call works on tasks
since a worker process keeps the function, and so the value it made, between
calls. Ray moves large values through its object store, not a socket:
``f.remote(x)`` serializes an argument over 100 KiB with pickle protocol 5,
copying the array's buffer once into the store; the worker reads it without
a copy (an ndarray on the store's shared memory, **read-only**); a return
value is copied once into the store and ``ray.get`` gives the driver a
read-only ndarray on that memory, again without a copy. So an array echo is
two copies, like the floor, but both sides get read-only arrays (a caller who
writes to one pays another copy, not counted here); ``bytes`` are built anew
on the receiving side. Ray copies a large buffer into the store with several
threads (its ``parallel_memcopy``), so one copy can beat the floor's
single-threaded ``np.copyto``; and a call ends when the driver holds the
value, before anything reads its pages (as with leakypool's mapped regions).
The argument is passed by value on every call (Ray puts it in the store each
time), as bench_large passes it; a Ray user who reuses one argument would
``ray.put`` it once.

Peak RSS: ``VmHWM`` from /proc/PID/status, reset before each case through
/proc/PID/clear_refs. ``dispatcher`` is this process (Ray's driver);
``worker`` is the largest over Ray's worker processes (the ``ray::`` processes
under this one, agents excluded) alive at the end of the case. RSS counts the
object store's shared-memory pages a process touched as well as its private
memory: an argument read in place counts in the driver's and the worker's
figure though it exists once, and store pages a process touched in earlier
cases stay mapped, so stay counted (a reset sets the peak to the current RSS),
and the figures grow along the run. ``rss_shmem_mib_at_end`` gives how much
of each side's RSS is such shared memory (``RssShmem`` after the case; for
the worker, the largest over them). The raylet, GCS server and agents are not
counted.

Side effects: Ray's session files under /tmp/ray; nothing else is written.
Usage-stats reporting is off (``RAY_USAGE_STATS_ENABLED=0``) and token
authentication too (``RAY_AUTH_MODE=disabled``, else Ray writes
~/.ray/auth_token); note that Ray's servers listen on every address, not on
loopback only. ``ray.shutdown()`` stops every process Ray started, also when
a case fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing sent off the machine
os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # else ray.init writes ~/.ray/auth_token

# Imported after the environment Ray reads.
import numpy as np
import ray

if __package__ in (None, ""):  # run as a script (in Ray's venv, from anywhere): the checkout's bench package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.support.large_cases import KINDS, MIB, cases, floors, hwm_kib, payload, reset_hwm, status_kib

WORKERS = 2  # num_cpus: at most this many tasks run at once
CALL_TIMEOUT_S = 120.0  # one call past this is recorded as the case's error

_made: dict[tuple[str, int], Any] = {}


def _value(kind: str, size: int) -> Any:
    """The worker's result for a result-only call: made once per process, returned each time."""
    key = (kind, size)
    if key not in _made:
        _made[key] = np.ones(size // 8) if kind == "array" else bytes(size)
    return _made[key]


@ray.remote
def echo(x: Any) -> Any:
    return x


@ray.remote
def take(x: Any) -> None:
    return None


@ray.remote
def make(kind: str, size: int) -> Any:
    return _value(kind, size)


def _descendants(root: int) -> list[int]:
    """Every process under ``root``, from /proc (the driver starts Ray's processes; the raylet its workers)."""
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    parent[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = [p for p, pp in parent.items() if pp == pid]
        out += kids
        todo += kids
    return out


def ray_worker_pids() -> list[int]:
    """Ray's worker processes under this one: proctitle ``ray::IDLE`` or ``ray::<task>``, agents excluded."""
    pids = []
    for pid in _descendants(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if title.startswith("ray::") and "Agent" not in title:
            pids.append(pid)
    return pids


def ray_call(call_kind: str, kind: str, size: int, value: Any) -> Callable[[], Any]:
    """One call of the case, returning the value in the driver's hands."""
    if call_kind == "echo":
        return lambda: ray.get(echo.remote(value), timeout=CALL_TIMEOUT_S)
    if call_kind == "arg":
        return lambda: ray.get(take.remote(value), timeout=CALL_TIMEOUT_S)
    return lambda: ray.get(make.remote(kind, size), timeout=CALL_TIMEOUT_S)


def _times(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        call()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        out.append(time.perf_counter() - t0)
    return out


def run_case(kind: str, call_kind: str, size: int) -> dict[str, Any]:
    value = payload(kind, size) if call_kind != "result" else None
    reps, warmup = (3, 1) if size >= 128 * MIB else (7, 2)
    for pid in (os.getpid(), *ray_worker_pids()):
        reset_hwm(pid)
    call = ray_call(call_kind, kind, size, value)
    error = ""
    try:
        times = _times(call, reps, warmup)
    except Exception as exc:  # noqa: BLE001 - a failing size is a result to report, not a crash of the run
        times, error = [], f"{type(exc).__name__}: {exc}"[:2000]
    del value, call
    workers = ray_worker_pids()
    row: dict[str, Any] = {
        "runner": "Ray",
        "payload": kind,
        "call": call_kind,
        "mib": size // MIB,
        "p50_ms": round(statistics.median(times) * 1e3, 2) if times else None,
        "rss_peak_mib": {
            "dispatcher": hwm_kib(os.getpid()) // 1024,
            "worker": max((hwm_kib(p) for p in workers), default=0) // 1024,
        },
        "rss_shmem_mib_at_end": {
            "dispatcher": status_kib(os.getpid(), "RssShmem") // 1024,
            "worker": max((status_kib(p, "RssShmem") for p in workers), default=0) // 1024,
        },
    }
    if error:
        row["error"] = error
    return row


def main(quick: bool) -> dict[str, Any]:
    todo = cases(quick)
    floor = floors(todo)
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"version": ray.__version__, "python": platform.python_version(), "num_cpus": WORKERS}
    info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    ray.init(num_cpus=WORKERS, include_dashboard=False, logging_level="warning")
    try:
        info["init_s"] = round(time.perf_counter() - t0, 2)
        info["object_store_mib"] = int(ray.cluster_resources().get("object_store_memory", 0)) // MIB
        ray.get([take.remote(i) for i in range(4)])  # workers up
        for kind, size in todo:
            for call_kind in KINDS:
                rows.append(run_case(kind, call_kind, size))
        info["worker_processes_at_end"] = len(ray_worker_pids())
    finally:
        ray.shutdown()
    info["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    info["processes_left_after_shutdown"] = len(_descendants(os.getpid()))
    return {"workload": "s", "ray": info, "floor": floor, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip 1 GiB")
    args = parser.parse_args()
    print(json.dumps(main(args.quick), indent=1))
