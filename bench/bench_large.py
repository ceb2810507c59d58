"""Workload (s): large values to a local worker and back, beside ProcessPoolExecutor and the memory floor.

For contiguous float64 numpy arrays of 1, 16, 128 MiB and 1 GiB and for
128 MiB of ``bytes``, three calls: echo (``f(x) -> x``), argument only
(``f(x) -> None``) and result only (``f(n) -> x``, the worker's value made
once and kept). Each figure is the p50 of a few calls after warm-up, on
``WorkerPool(spawn=2)`` and ``ProcessPoolExecutor(2)`` in the same run, with
the peak RSS of each side (the dispatching process and the worker, reset
before each case through /proc/PID/clear_refs), beside the floor: one
``np.copyto`` of N bytes into memory already touched per direction (two for
an echo). Prints one JSON object::

    python -m bench.bench_large            # every size
    python -m bench.bench_large --quick    # without 1 GiB
    python -m bench.bench_large --grpc     # echo over gRPC (workers on loopback TCP) beside a bare grpc.aio echo

With ``--grpc`` the pool's workers are on TCP (``local_transport="tcp"``,
what a LAN worker sees: no side connection, so the buffers cross the stream
in chunks, `pool._transport._chunks`), and the peer is a bare grpc.aio
bidirectional stream echoing one message of the same number of bytes from a
server in a subprocess (no pickling): what gRPC itself costs.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import pool

from .support.large_cases import KINDS, MIB, cases, floors, hwm_kib, payload, reset_hwm

_made: dict[tuple[str, int], Any] = {}


def _value(kind: str, size: int) -> Any:
    """The worker's result for a result-only call: made once per process, returned each time."""
    key = (kind, size)
    if key not in _made:
        _made[key] = np.ones(size // 8) if kind == "array" else bytes(size)
    return _made[key]


def echo_fn(x: Any) -> Any:
    return x


def take_fn(x: Any) -> None:
    return None


def make_fn(kind: str, size: int) -> Any:
    return _value(kind, size)


@pool.routine
async def echo(x):
    return x


@pool.routine
async def take(x):
    return None


@pool.routine
async def make(kind, size):
    return _value(kind, size)


async def _times(call: Callable[[], Any], reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        await call()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t0)
    return out


async def run_case(name: str, kind: str, call_kind: str, size: int, runner: Any, pids: list[int]) -> dict[str, Any]:
    value = payload(kind, size) if call_kind != "result" else None
    reps, warmup = (3, 1) if size >= 128 * MIB else (7, 2)
    for pid in (os.getpid(), *pids):
        reset_hwm(pid)
    call = runner(call_kind, kind, size, value)
    error = ""
    try:
        times = await _times(call, reps, warmup)
    except Exception as exc:  # noqa: BLE001 - a failing size is a result to report, not a crash of the run
        times, error = [], f"{type(exc).__name__}: {exc}"
    del value, call
    row = {
        "runner": name,
        "payload": kind,
        "call": call_kind,
        "mib": size // MIB,
        "p50_ms": round(statistics.median(times) * 1e3, 2) if times else None,
        "rss_peak_mib": {"dispatcher": hwm_kib(os.getpid()) // 1024, "worker": max(hwm_kib(p) for p in pids) // 1024},
    }
    if error:
        row["error"] = error
    return row


def leaky_runner(call_kind: str, kind: str, size: int, value: Any) -> Callable[[], Any]:
    if call_kind == "echo":
        return lambda: echo(value)
    if call_kind == "arg":
        return lambda: take(value)
    return lambda: make(kind, size)


def ppe_runner(ex: concurrent.futures.ProcessPoolExecutor) -> Callable[..., Callable[[], Any]]:
    loop = asyncio.get_running_loop()

    def runner(call_kind: str, kind: str, size: int, value: Any) -> Callable[[], Any]:
        if call_kind == "echo":
            return lambda: loop.run_in_executor(ex, echo_fn, value)
        if call_kind == "arg":
            return lambda: loop.run_in_executor(ex, take_fn, value)
        return lambda: loop.run_in_executor(ex, make_fn, kind, size)

    return runner


def _grpc_echo_server(port_queue: Any) -> None:
    """A bare grpc.aio server (in a subprocess) whose one stream method echoes every message."""
    import grpc

    async def serve() -> None:
        async def stream(requests: Any, context: Any) -> Any:
            async for request in requests:
                yield request

        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream, _same, _same)}
        )
        server = grpc.aio.server(options=_GRPC_OPTIONS)
        server.add_generic_rpc_handlers((handler,))
        port_queue.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def _same(data: bytes) -> bytes:
    return data


_GRPC_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


async def grpc_rows(todo: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Echo over gRPC: the pool with its workers on loopback TCP, and a bare grpc.aio echo of as many bytes."""
    import multiprocessing

    import grpc

    rows = []
    async with pool.WorkerPool(spawn=2, local_transport="tcp") as p:
        pids = list(p.pids)
        for kind, size in todo:
            rows.append(await run_case("leakypool-grpc", kind, "echo", size, leaky_runner, pids))
    context = multiprocessing.get_context("spawn")
    ports = context.Queue()
    server = context.Process(target=_grpc_echo_server, args=(ports,), daemon=True)
    server.start()
    assert server.pid is not None
    try:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{ports.get(timeout=60)}", options=_GRPC_OPTIONS)
        stream = channel.stream_stream("/bench.Echo/Stream", _same, _same)()

        def bare(call_kind: str, kind: str, size: int, value: Any) -> Callable[[], Any]:
            data = bytes(memoryview(value).cast("B"))

            async def once() -> None:
                await stream.write(data)
                await stream.read()

            return once

        for kind, size in todo:
            rows.append(await run_case("bare grpc.aio", kind, "echo", size, bare, [server.pid]))
        await channel.close()
    finally:
        server.kill()
        server.join()
    return rows


async def main(quick: bool, over_grpc: bool = False) -> dict[str, Any]:
    todo = cases(quick)
    rows: list[dict[str, Any]] = []
    floor = floors(todo)
    if over_grpc:
        return {"workload": "s over gRPC", "floor": floor, "rows": await grpc_rows(todo)}
    async with pool.WorkerPool(spawn=2) as p:
        pids = list(p.pids)
        for kind, size in todo:
            for call_kind in KINDS:
                rows.append(await run_case("leakypool", kind, call_kind, size, leaky_runner, pids))
    with concurrent.futures.ProcessPoolExecutor(2) as ex:
        list(ex.map(take_fn, range(4)))  # workers up
        pids = list(ex._processes)  # their peak RSS (a private attribute: no public one)
        runner = ppe_runner(ex)
        for kind, size in todo:
            for call_kind in KINDS:
                rows.append(await run_case("ProcessPoolExecutor", kind, call_kind, size, runner, pids))
    return {"workload": "s", "floor": floor, "rows": rows}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip 1 GiB")
    parser.add_argument("--grpc", action="store_true", help="echo over gRPC beside a bare grpc.aio echo")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.quick, args.grpc)), indent=1))
