"""Routines the integration tests run on real workers.

A non-test module, so workers import it by name (the pool ships routines
by reference when it can). `notify` lets a routine tell the test what it
is doing, over a socket, so tests wait on events rather than on sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time

import pool


def notify(address: tuple[str, int] | None, message: str) -> None:
    """Send one line to the test's `Signals` server (no-op without an address)."""
    if address is None:
        return
    with socket.create_connection(address, timeout=5) as conn:
        conn.sendall(message.encode() + b"\n")


@pool.routine
async def add(x, y):
    return x + y


@pool.routine
async def noop():
    return None


@pool.routine
async def echo(value):
    return value


@pool.routine
async def pid():
    return os.getpid()


@pool.routine
async def count(n):
    for i in range(n):
        yield i


@pool.routine
async def accumulate():
    """Yields the running total of what is sent in; a thrown ValueError resets it."""
    total = 0
    while True:
        try:
            sent = yield total
        except ValueError:
            total = 0
            continue
        total += sent or 0


@pool.routine
async def guarded_stream(signals):
    """Yields forever; tells the test when its finally block runs."""
    try:
        i = 0
        while True:
            yield i
            i += 1
    finally:
        notify(signals, f"closed {os.getpid()}")


@pool.routine
async def fail(message):
    raise ValueError(message)


class Custom(Exception):
    def __init__(self, code, detail):
        super().__init__(code, detail)
        self.code = code
        self.detail = detail


@pool.routine
async def fail_custom():
    raise Custom(7, "seven")


@pool.routine
async def sleep(seconds, signals=None, tag=""):
    """Sleep; notify 'started <tag> <pid>', and 'cancelled <tag>' if cancelled."""
    notify(signals, f"started {tag} {os.getpid()}")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        notify(signals, f"cancelled {tag}")
        raise
    return seconds


@pool.routine
async def unpicklable_result():
    return threading.Lock()


class Unpicklable(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


@pool.routine
async def unpicklable_exception():
    raise Unpicklable()


@pool.routine
async def fact(n):
    return 1 if n <= 1 else n * await fact(n - 1)


@pool.routine
async def nested_count(n):
    """A generator routine that streams from another generator routine."""
    async for i in count(n):
        yield i * 10


@pool.routine
async def call_pids(n):
    """Nested fan-out: the pids of n nested calls."""
    return await asyncio.gather(*(pid() for _ in range(n)))


class Counter:
    def __init__(self, start):
        self.start = start

    @pool.routine
    async def plus(self, n):
        return self.start + n


@pool.routine
async def short(seconds=0.01):
    """A short task: sleep, return the worker's pid."""
    await asyncio.sleep(seconds)
    return os.getpid()


@pool.routine
async def span(seconds, tag=None, signals=None):
    """Sleep; return (tag, pid, start, end) in wall-clock time, to measure overlap."""
    start = time.time()
    notify(signals, f"start {tag}")
    await asyncio.sleep(seconds)
    return tag, os.getpid(), start, time.time()


@pool.routine
async def failing_span(seconds, tag=None):
    """Like span, but raises at the end."""
    await asyncio.sleep(seconds)
    raise RuntimeError(f"task {tag} failed")


@pool.routine
async def recurse(depth):
    """Calls itself to ``depth``; each level waits on the next (nested dispatch)."""
    if depth <= 0:
        return [os.getpid()]
    return [os.getpid()] + await recurse(depth - 1)


def max_overlap(spans) -> int:
    """Most intervals (…, start, end) open at once."""
    events = sorted([(s[-2], 1) for s in spans] + [(s[-1], -1) for s in spans], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


SOLO = pool.Queue("solo", concurrency=1)


@pool.routine(queue=SOLO)
async def solo_recurse(depth):
    """Calls itself inside a queue of one: each waiting level lends its slot to the next (seed 001)."""
    return depth if depth <= 0 else await solo_recurse(depth - 1)


DUO = pool.Queue("duo", concurrency=2)


@pool.routine(queue=DUO)
async def duo_recurse(depth):
    """Calls itself inside a queue of two: two levels may borrow, a third is a Deadlock."""
    return depth if depth <= 0 else await duo_recurse(depth - 1)


DB = pool.Queue("db", concurrency=2)


@pool.routine(queue=DB)
async def db_read(seconds, tag):
    start = time.time()
    await asyncio.sleep(seconds)
    return "read", tag, start, time.time()


@pool.routine(queue=DB)
async def db_write(seconds, tag):
    start = time.time()
    await asyncio.sleep(seconds)
    return "write", tag, start, time.time()


# -- durable jobs -----------------------------------------------------------------------


def executions(directory, name):
    """(starts, ends) that `mark` recorded for ``name``."""
    try:
        with open(os.path.join(directory, name)) as f:
            lines = f.read().split()
    except FileNotFoundError:
        return 0, 0
    return lines.count("start"), lines.count("end")


@pool.routine
async def mark(directory, name, seconds=0.0):
    """Record each execution in a side-effect file (start, then end); return ``name``."""
    path = os.path.join(directory, name)
    with open(path, "a") as f:
        f.write("start\n")
    await asyncio.sleep(seconds)
    with open(path, "a") as f:
        f.write("end\n")
    return name


@pool.routine
async def hold_until(path, signals, tag):
    """Tell ``signals`` it started, then wait (bounded) until ``path`` exists."""
    notify(signals, f"start {tag}")
    for _ in range(3000):
        if os.path.exists(path):
            return tag
        await asyncio.sleep(0.01)
    raise TimeoutError(f"{path} never appeared")


@pool.routine
async def flaky(directory, name, failures):
    """Raise KeyError on the first ``failures`` executions, then return the execution count."""
    path = os.path.join(directory, name)
    with open(path, "a") as f:
        f.write("start\n")
    starts, _ = executions(directory, name)
    if starts <= failures:
        raise KeyError(f"execution {starts} fails")
    return starts


@pool.routine
async def die_once(directory, name):
    """Kill this worker on the first execution (SIGKILL), succeed on the next."""
    path = os.path.join(directory, name)
    with open(path, "a") as f:
        f.write("start\n")
    if executions(directory, name)[0] == 1:
        await asyncio.sleep(0.2)  # let the worker's Accept leave first: the pool saw this attempt start
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


@pool.routine
async def die_at_once(directory, name):
    """Record the execution, then kill this worker in the same step: before its Accept could leave alone."""
    with open(os.path.join(directory, name), "a") as f:
        f.write("start\n")
    os.kill(os.getpid(), signal.SIGKILL)


@pool.routine
async def big_result(size):
    return b"x" * size


def _load_only_on_a_worker():
    if "LEAKYPOOL_UID" not in os.environ:  # spawned workers have one; the dispatching process does not
        raise RuntimeError("this result cannot be loaded outside a worker")
    return "loaded"


class WorkerOnlyResult:
    """Pickles fine; unpickling it in the dispatching process raises (a corrupt result, as seen there)."""

    def __reduce__(self):
        return (_load_only_on_a_worker, ())


@pool.routine
async def corrupt_result():
    return WorkerOnlyResult()


@pool.routine
async def interval(directory, name, key, seconds):
    """Sleep; record ``start end key pid`` in directory/name (one line per execution)."""
    start = time.time()
    await asyncio.sleep(seconds)
    with open(os.path.join(directory, name), "a") as f:
        f.write(f"{start} {time.time()} {key} {os.getpid()}\n")
    return name


@pool.routine
async def run_program(*argv):
    """Run a program in the worker (the event loop's subprocess support) and return its stdout."""
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await process.communicate()
    return out


@pool.routine
async def log_warning(text):
    import logging

    logging.getLogger("tests.routines").warning(text)


@pool.routine
async def listening_tcp_ports():
    """TCP ports this worker process holds listening sockets for."""
    ports = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            probe = socket.socket(fileno=int(name))
        except OSError:
            continue
        try:
            if probe.family in (socket.AF_INET, socket.AF_INET6) and probe.getsockopt(
                socket.SOL_SOCKET, socket.SO_ACCEPTCONN
            ):
                ports.add(probe.getsockname()[1])
        except OSError:
            pass
        finally:
            probe.detach()
    return ports


@pool.routine
async def deprecated():
    """Warn a DeprecationWarning: ignored under a fresh interpreter's filters, an error under ``-W error``."""
    import warnings

    warnings.warn("old", DeprecationWarning, stacklevel=1)
    return "ok"


@pool.routine
async def spin_until(path, signals=None):
    """Hog the CPU (no await) until ``path`` exists (at most 120 s), so the loop is held as long as the test says."""
    notify(signals, f"spinning {os.getpid()}")
    end = time.monotonic() + 120
    while not os.path.exists(path) and time.monotonic() < end:
        next_look = time.perf_counter() + 0.01
        while time.perf_counter() < next_look:
            pass
    return os.getpid()


@pool.routine
async def held_span(item):
    """``item`` is ``(path, signals, tag)``: like `span`, but runs until ``path`` exists (at most ~30 s); one argument, for pool.map."""
    path, signals, tag = item
    start = time.time()
    notify(signals, f"start <{tag}>")
    for _ in range(3000):
        if os.path.exists(path):
            break
        await asyncio.sleep(0.01)
    return tag, os.getpid(), start, time.time()


@pool.routine
async def python_version():
    """The worker's Python, as "3.11" (which interpreter ran the call)."""
    import sys

    return f"{sys.version_info[0]}.{sys.version_info[1]}"


@pool.routine
async def make_adder(n):
    """A closure: a value that can only cross by value (code of the worker's Python)."""
    return lambda x: x + n


class SlowFirstVet:
    """An async backpressure hook that takes ``seconds`` to vet the first call each worker sees, then none; it
    appends a line to ``log`` per call vetted.

    A placement delayed inside the worker, as a stalled process or a slow network delays one on its way.
    """

    def __init__(self, seconds: float, log: str) -> None:
        self.seconds = seconds
        self.log = log
        self.vetted = 0

    async def __call__(self, context) -> bool:
        self.vetted += 1
        with open(self.log, "a") as f:
            f.write(f"vet {context.task.name}\n")
        if self.vetted == 1:
            await asyncio.sleep(self.seconds)
        return False
