"""The cost of sealed streams (docs/lan-security.md, "Sealed streams"): (a), (b), (d) over TCP off loopback.

A worker runs in a network namespace of its own (10.78.0.2, a veth pair from
this namespace's 10.78.0.1), started with ``--insecure``; the pool dials it
without TLS, so every message is sealed. Run it on two checkouts in one
sitting to compare with and without the seal::

    tools/private_net.sh .venv/bin/python -m bench.bench_sealed
    PYTHONPATH=/path/to/other/checkout tools/private_net.sh .venv/bin/python -m bench.bench_sealed

Needs root inside the private namespace (``tools/private_net.sh`` gives it). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from functools import partial
from typing import Self

import uvloop

import pool
from bench.bench_callpath import cpu_s
from bench.support import routines
from bench.support.workloads import concurrent, log, sequential, summarize_us

HERE, THERE = "10.78.0.1", "10.78.0.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Host:
    """A namespace at `THERE`, held open by a sleeping process, joined to this one by a veth pair."""

    def __enter__(self) -> Self:
        self.holder = subprocess.Popen(["unshare", "-n", "sleep", "infinity"])
        try:
            _ip("link", "add", "lpseal0", "type", "veth", "peer", "name", "lpseal1")
            _ip("link", "set", "lpseal1", "netns", str(self.holder.pid))
            _ip("addr", "add", f"{HERE}/24", "dev", "lpseal0")
            _ip("link", "set", "lpseal0", "up")
            for args in (("addr", "add", f"{THERE}/24", "dev", "lpseal1"), ("link", "set", "lpseal1", "up")):
                subprocess.run(["nsenter", "-t", str(self.holder.pid), "-n", "ip", *args], check=True, timeout=30)
            subprocess.run(["nsenter", "-t", str(self.holder.pid), "-n", "ip", "link", "set", "lo", "up"], check=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "link", "del", "lpseal0"], capture_output=True, timeout=30, check=False)
        self.holder.kill()
        self.holder.wait(30)


def start_worker(host: Host) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    """``worker_main.py`` on the host, insecure, on a port of its own; its READY record."""
    read, write = os.pipe()
    args = [
        sys.executable,
        "worker_main.py",
        "--host",
        THERE,
        "--port",
        "0",
        "--insecure",
        "--max-concurrent-tasks",
        "0",
    ]
    args += ["--ready-fd", str(write)]
    child = subprocess.Popen(["nsenter", "-t", str(host.holder.pid), "-n", *args], pass_fds=(write,))
    os.close(write)
    with open(read) as f:
        line = f.readline().strip()
    if not line.startswith("READY "):
        child.kill()
        child.wait(30)
        raise RuntimeError(f"the worker did not start: {line!r}")
    return child, json.loads(line[len("READY ") :])


async def measure(record: dict[str, object], scale: int) -> dict[str, object]:
    metadata = pool.WorkerMetadata(uid=uuid.UUID(str(record["uid"])), address=f"{THERE}:{record['port']}")
    result: dict[str, object] = {}
    async with pool.WorkerPool(discovery=pool.StaticDiscovery(workers=[metadata]), insecure=True) as p:
        await p.wait_for_workers(1, timeout=30)
        await sequential(routines.noop, 500)
        log("(a) latency")
        n = 5_000 // scale
        cpu0, worker0 = time.process_time(), cpu_s(int(str(record["pid"])))
        result["a_noop_latency"] = summarize_us(await sequential(routines.noop, n))
        cpu1, worker1 = time.process_time(), cpu_s(int(str(record["pid"])))
        result["a_cpu_us_per_call"] = {
            "pool": round((cpu1 - cpu0) / n * 1e6, 1),
            "worker": round((worker1 - worker0) / n * 1e6, 1),
        }
        log("(b) no-op throughput")
        await concurrent(routines.noop, 1_000 // scale, 256)
        elapsed, errors = await concurrent(routines.noop, 10_000 // scale, 256)
        result["b_noop_throughput"] = {"tasks_per_s": round(10_000 // scale / elapsed, 1), "errors": errors}
        log("(d) 1 MiB echo")
        call = partial(routines.echo, os.urandom(1 << 20))
        await sequential(call, 20)
        s = summarize_us(await sequential(call, 300 // scale))
        result["d_echo_1mib"] = {"p50_ms": round(s["p50_us"] / 1e3, 3), "p99_ms": round(s["p99_us"] / 1e3, 3)}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1/10 sizes")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with Host() as host:
        child, record = start_worker(host)
        try:
            rounds = [uvloop.run(measure(record, 10 if args.quick else 1)) for _ in range(args.rounds)]
            keys = ("a_noop_latency", "p50_us"), ("a_cpu_us_per_call", "pool"), ("a_cpu_us_per_call", "worker")
            medians = {f"{a}.{b}": statistics.median(r[a][b] for r in rounds) for a, b in keys}  # type: ignore[index]
        finally:
            child.kill()
            child.wait(30)
    print(
        json.dumps(
            {
                "transport": "tcp off loopback, insecure",
                "sealed_module": _has_seal(),
                "medians": medians,
                "rounds": rounds,
            }
        )
    )


def _has_seal() -> bool:
    import importlib.util

    return importlib.util.find_spec("pool._transport._stream_seal") is not None


if __name__ == "__main__":
    main()
