"""Workload (o): what a call costs each side, beside the floor's own round trip, in one sitting.

For (a) (sequential no-op calls) and (b) (no-op calls, 256 in flight), it
reports the p50 round trip (or tasks/s) and the CPU µs per call of the
calling process and of the other side (all threads, from /proc), beside
the same figures for (l), the floor: two uvloop processes ping-ponging a
64-byte length-framed message over a unix socket (pipelined 256 deep for
(b)). CPU time survives a busy machine better than wall-clock time.

Rounds alternate floor / leakypool (/ baseline), the order rotating from
one round to the next; each runs in a fresh process. Prints one JSON
object with every round and the medians::

    python -m bench.bench_callpath [--rounds 3] [--calls 20000] [--tp-calls 10000]
    python -m bench.bench_callpath --baseline /work/main   # before/after: another checkout, its own .venv
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
WARMUP_CALLS = 3_000
TP_CONCURRENCY = 256
FLOOR_MESSAGE = b"x" * 64
_LENGTH = struct.Struct(">I")
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid``, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def _sequential(rt: Callable[[], Awaitable[Any]], n: int, others: list[int]) -> dict[str, float]:
    lat = []
    c0, o0 = time.process_time(), sum(cpu_s(p) for p in others)
    for _ in range(n):
        t = time.perf_counter()
        await rt()
        lat.append(time.perf_counter() - t)
    c1, o1 = time.process_time(), sum(cpu_s(p) for p in others)
    return {
        "p50_us": round(statistics.median(lat) * 1e6, 1),
        "caller_cpu_us": round((c1 - c0) / n * 1e6, 1),
        "other_side_cpu_us": round((o1 - o0) / n * 1e6, 1),
    }


async def _concurrent(rt: Callable[[], Awaitable[Any]], n: int, others: list[int]) -> dict[str, float]:
    remaining = n

    async def client() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await rt()

    c0, o0 = time.process_time(), sum(cpu_s(p) for p in others)
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(TP_CONCURRENCY)))
    elapsed = time.perf_counter() - t0
    c1, o1 = time.process_time(), sum(cpu_s(p) for p in others)
    return {
        "tasks_per_s": round(n / elapsed),
        "caller_cpu_us": round((c1 - c0) / n * 1e6, 1),
        "other_side_cpu_us": round((o1 - o0) / n * 1e6, 1),
    }


# -- the floor (l) -------------------------------------------------------------------


async def _floor_server(path: str) -> None:
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while True:
                (n,) = _LENGTH.unpack(await r.readexactly(4))
                w.write(_LENGTH.pack(n) + await r.readexactly(n))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    server = await asyncio.start_unix_server(handle, path)
    async with server:
        await server.serve_forever()


async def _floor_client(path: str, server_pid: int, calls: int, tp_calls: int) -> dict[str, Any]:
    for _ in range(500):
        try:
            reader, writer = await asyncio.open_unix_connection(path)
            break
        except OSError:
            await asyncio.sleep(0.01)
    else:
        raise RuntimeError("the floor's server did not start")
    frame = _LENGTH.pack(len(FLOOR_MESSAGE)) + FLOOR_MESSAGE

    async def rt() -> None:
        writer.write(frame)
        (n,) = _LENGTH.unpack(await reader.readexactly(4))
        await reader.readexactly(n)

    for _ in range(WARMUP_CALLS):
        await rt()
    a = await _sequential(rt, calls, [server_pid])
    # (b)'s floor: 256 round trips in flight on the one connection (replies come back in order).
    waiters: list[asyncio.Future[None]] = []

    async def replies() -> None:
        while True:
            (n,) = _LENGTH.unpack(await reader.readexactly(4))
            await reader.readexactly(n)
            waiters.pop(0).set_result(None)

    pump = asyncio.ensure_future(replies())

    async def pipelined() -> None:
        done = asyncio.get_running_loop().create_future()
        waiters.append(done)
        writer.write(frame)
        await done

    b = await _concurrent(pipelined, tp_calls, [server_pid])
    pump.cancel()
    return {"a": a, "b": b}


def run_floor(calls: int, tp_calls: int) -> dict[str, Any]:
    import uvloop

    path = tempfile.mktemp(suffix=".sock")  # noqa: S306 - a unix socket path: bind() creates it, and fails if anyone got there first
    pid = os.fork()
    if pid == 0:
        try:
            uvloop.run(_floor_server(path))
        finally:
            os._exit(0)
    try:
        return uvloop.run(_floor_client(path, pid, calls, tp_calls))
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        os.unlink(path)


# -- leakypool ---------------------------------------------------------------------


def _workers() -> list[int]:
    """This process's local workers: its children running worker_main, and its children's children (forked ones)."""
    me = os.getpid()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == me:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if b"worker_main" in f.read():
                        found.append(int(name))
                continue
            with open(f"/proc/{ppid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def run_leakypool(calls: int, tp_calls: int) -> dict[str, Any]:
    import uvloop

    import pool
    from bench.support import routines

    async def main() -> dict[str, Any]:
        async with pool.WorkerPool(spawn=2):
            for _ in range(WARMUP_CALLS):
                await routines.noop()
            workers = _workers()
            a = await _sequential(routines.noop, calls, workers)
            await _concurrent(routines.noop, tp_calls // 10, workers)  # warm-up at the same concurrency
            b = await _concurrent(routines.noop, tp_calls, workers)
            return {"a": a, "b": b, "workers": len(workers)}

    return uvloop.run(main())


def _child(kind: str, calls: int, tp_calls: int) -> None:
    result = run_floor(calls, tp_calls) if kind == "floor" else run_leakypool(calls, tp_calls)
    print(json.dumps(result), flush=True)


def _round(kind: str, python: str, cwd: pathlib.Path, calls: int, tp_calls: int) -> dict[str, Any]:
    out = subprocess.run(
        [
            python,
            "-m",
            "bench.bench_callpath",
            "--child",
            "floor" if kind == "floor" else "leakypool",
            "--calls",
            str(calls),
            "--tp-calls",
            str(tp_calls),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
        check=False,
    )
    if out.returncode:
        sys.exit(f"{kind} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(rounds: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {w: {f: statistics.median(r[w][f] for r in rounds) for f in rounds[0][w]} for w in ("a", "b")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20_000, help="(a): sequential calls measured")
    ap.add_argument("--tp-calls", type=int, default=10_000, help="(b): calls measured, 256 in flight")
    ap.add_argument("--baseline", type=pathlib.Path, help="another checkout (with its .venv) to run beside this one")
    ap.add_argument("--child", choices=("floor", "leakypool"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.calls, args.tp_calls)
        return
    # A checkout from before this benchmark existed runs this very file from here (cwd: the checkout).
    runs: dict[str, tuple[str, pathlib.Path]] = {"floor": (sys.executable, ROOT), "leakypool": (sys.executable, ROOT)}
    if args.baseline is not None:
        base = args.baseline.resolve()
        runs["baseline"] = (str(base / ".venv" / "bin" / "python"), base)
    rounds: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    kinds = list(runs)
    for turn in range(args.rounds):
        for kind in kinds[turn % len(kinds) :] + kinds[: turn % len(kinds)]:  # the order rotates: no kind always first
            python, cwd = runs[kind]
            if kind == "baseline" and not (cwd / "bench" / "bench_callpath.py").exists():
                rounds[kind].append(_round_from(python, cwd, args.calls, args.tp_calls))
            else:
                rounds[kind].append(_round(kind, python, cwd, args.calls, args.tp_calls))
    med = {k: _median(v) for k, v in rounds.items()}
    floor = med["floor"]
    ratio = {
        k: {
            "a_p50": round(m["a"]["p50_us"] / floor["a"]["p50_us"], 2),
            "a_caller_cpu": round(m["a"]["caller_cpu_us"] / floor["a"]["caller_cpu_us"], 2),
            "a_other_side_cpu": round(m["a"]["other_side_cpu_us"] / floor["a"]["other_side_cpu_us"], 2),
            "b_caller_cpu": round(m["b"]["caller_cpu_us"] / floor["b"]["caller_cpu_us"], 2),
            "b_other_side_cpu": round(m["b"]["other_side_cpu_us"] / floor["b"]["other_side_cpu_us"], 2),
        }
        for k, m in med.items()
        if k != "floor"
    }
    print(json.dumps({"rounds": rounds, "median": med, "ratio_to_floor": ratio}))


def _round_from(python: str, cwd: pathlib.Path, calls: int, tp_calls: int) -> dict[str, Any]:
    """A leakypool round in a checkout that lacks this file: this file's code, that checkout's ``pool``."""
    code = (
        f"import sys, json; sys.path[:0] = [{str(cwd)!r}, {str(ROOT / 'bench')!r}];"
        "import bench_callpath as b;"
        f"print(json.dumps(b.run_leakypool({calls}, {tp_calls})))"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=900, cwd=cwd, check=False)
    if out.returncode:
        sys.exit(f"baseline failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
