"""How long discovery takes: a worker's start to its first task, its exit to its removal.

For LAN (zeroconf, on loopback) and local (registry directory) discovery.
LAN discovery multicasts, so run it in a private network namespace:

    tools/private_net.sh .venv/bin/python -m bench.bench_discovery

Prints one JSON object (medians over a few runs, seconds).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

import uvloop

import pool
from bench.support import routines
from pool._base._process import watch_exit

RUNS = 5


async def one(discovery: pool.DiscoveryLike, flags: list[str]) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEAKYPOOL_")}
    async with pool.WorkerPool(discovery=discovery) as p:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "worker_main.py", *flags], env=env, stderr=subprocess.DEVNULL)
        exited = watch_exit(proc)
        try:
            await p.wait_for_workers(1, timeout=60)
            t_found = time.perf_counter()
            await routines.noop()
            t_first = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            t_exit = time.perf_counter()
            await p._layers.membership.until(lambda: not p.workers, 60)
            t_gone = time.perf_counter()
        finally:
            if proc.returncode is None:
                proc.kill()
            await exited
    return {
        "start_to_found_s": t_found - t0,
        "start_to_first_task_s": t_first - t0,
        "exit_to_removed_s": t_gone - t_exit,
    }


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


async def main() -> dict[str, object]:
    result: dict[str, object] = {"runs": RUNS}
    with tempfile.TemporaryDirectory() as registry:
        local = pool.LocalDiscovery(registry)
        flags = ["--discovery", "local", "--local-registry", registry, "--max-concurrent-tasks", "0"]
        result["local"] = medians([await one(local, flags) for _ in range(RUNS)])
    if os.environ.get("LEAKYPOOL_IN_PRIVATE_NET") == "1":
        kind = f"_lp{uuid.uuid4().hex[:8]}._tcp.local."
        lan = pool.LanDiscovery(interfaces=["127.0.0.1"], service_type=kind)
        flags = [
            "--discovery",
            "lan",
            "--interfaces",
            "127.0.0.1",
            "--service-type",
            kind,
            "--max-concurrent-tasks",
            "0",
        ]
        result["lan"] = medians([await one(lan, flags) for _ in range(RUNS)])
    else:
        result["lan"] = "skipped: run through tools/private_net.sh (zeroconf multicasts)"
    return result


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main()), indent=2))
