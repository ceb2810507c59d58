"""Run leakypool's benchmarks beside the peers' in interleaved rounds and print medians and ratios.

The machine's speed drifts (2x within one sitting has been seen), so one
run of each runtime can say the opposite of the truth. Here every round runs
each runtime once, one after another (A B C A B C ...), never two at once;
a workload's ratio is the median of its per-round ratios, with their spread.

Runtimes: leakypool (``bench.bench_pool``; over unix sockets, and over TCP
with ``--tcp-too``, without the worker template with ``--no-template-too``,
and from another checkout with ``--baseline DIR``, for before/after), ProcessPoolExecutor and the bare grpc.aio echo (the
floor for a gRPC design) from ``../shared/bench-peers``, wool 0.15.7
when ``--peer-python`` names a venv that has it (``--make-peer-venv``), and
Ray and Dask when ``--ray-dask-python`` names one that has them.

    python -m bench.compare [--rounds 5] [--quick] [--tcp-too] [--no-template-too] [--baseline DIR] [--peer-python PY]

Prints one JSON object: per workload, each runtime's median, and the
median (and range) of leakypool's per-round ratio to each peer.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "bench-peers"

# workload -> (how to read it from each runtime's JSON, "lower" or "higher" is better)
Reader = Callable[[dict[str, Any]], float | None]
WORKLOADS: dict[str, dict[str, Any]] = {
    "a_noop_p50_us": {
        "better": "lower",
        "read": {
            "leakypool": lambda r: r["a_noop_latency"]["p50_us"],
            "processpool": lambda r: r["a_noop_latency"]["p50_us"],
            "wool": lambda r: r["a_noop_latency"]["p50_us"],
            "ray": lambda r: r["a_noop_latency"]["p50_us"],
            "dask": lambda r: r["a_noop_latency"]["p50_us"],
            "grpc_stream": lambda r: r["stream_rtt_p50_us"],
        },
    },
    "b_noop_tasks_per_s": {
        "better": "higher",
        "read": {
            "leakypool": lambda r: r["b_noop_throughput"]["tasks_per_s"],
            "processpool": lambda r: r["b_noop_throughput"]["tasks_per_s"],
            "wool": lambda r: r["b_noop_throughput"]["tasks_per_s"],
            "ray": lambda r: r["b_noop_throughput"]["tasks_per_s"],
            "dask": lambda r: r["b_noop_throughput"]["tasks_per_s"],
        },
    },
    "c_sleep_tasks_per_s": {
        "better": "higher",
        "read": {
            name: (lambda r: r.get("c_sleep_throughput", {}).get("tasks_per_s"))
            for name in ("leakypool", "processpool", "wool", "ray", "dask")
        },
    },
    "d_echo_1mib_p50_ms": {
        "better": "lower",
        "read": {
            "leakypool": lambda r: r["d_echo_1mib"]["p50_ms"],
            "processpool": lambda r: r["d_echo_1mib"]["p50_ms"],
            "wool": lambda r: r["d_echo_1mib"]["p50_ms"],
            "ray": lambda r: r["d_echo_1mib"]["p50_ms"],
            "dask": lambda r: r["d_echo_1mib"]["p50_ms"],
            "grpc_stream": lambda r: r["stream_1mib_p50_ms"],
        },
    },
    "b_client_cpu_us_per_call": {
        "better": "lower",
        "read": {
            "leakypool": lambda r: r["b_noop_throughput"]["client_cpu_us_per_call"],
            "processpool": lambda r: r["b_noop_throughput"]["cpu"]["client_cpu_us_per_call"],
        },
    },
    "b_workers_cpu_us_per_call": {
        "better": "lower",
        "read": {
            "leakypool": lambda r: r["b_noop_throughput"]["workers_cpu_us_per_call"],
            "processpool": lambda r: r["b_noop_throughput"]["cpu"]["workers_cpu_us_per_call"],
        },
    },
    "e_first_result_s": {
        "better": "lower",
        "read": {
            "leakypool": lambda r: r["e_cold_start_median_first_result_s"],
            "processpool": lambda r: r.get("e_cold_start_median_first_result_s"),
            "wool": lambda r: r.get("e_cold_start_median_first_result_s"),
            "ray": lambda r: r.get("e_cold_start_median_first_result_s"),
            "dask": lambda r: r.get("e_cold_start_median_first_result_s"),
        },
    },
}


def run_json(
    cmd: list[str], cwd: pathlib.Path, env: dict[str, str] | None = None, timeout: float = 1800
) -> dict[str, Any]:
    print(f"[compare] {' '.join(cmd)}", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=True, env=env).stdout
    return json.loads(out[out.index("{") :])


def commands(args: argparse.Namespace) -> dict[str, tuple[list[str], pathlib.Path, dict[str, str] | None]]:
    import os

    quick = ["--quick"] if args.quick else []
    peer = args.peer_python or sys.executable
    runs: dict[str, tuple[list[str], pathlib.Path, dict[str, str] | None]] = {
        "leakypool": ([sys.executable, "-m", "bench.bench_pool", *quick], ROOT, None),
    }
    if args.tcp_too:
        env = {**os.environ, "LEAKYPOOL_LOCAL_TRANSPORT": "tcp"}
        runs["leakypool_tcp"] = ([sys.executable, "-m", "bench.bench_pool", *quick], ROOT, env)
    if args.no_template_too:
        env = {**os.environ, "LEAKYPOOL_WORKER_TEMPLATE": "0"}
        runs["leakypool_no_template"] = ([sys.executable, "-m", "bench.bench_pool", *quick], ROOT, env)
    if args.baseline:
        baseline = pathlib.Path(args.baseline).resolve()
        env = {**os.environ, "PYTHONPATH": str(baseline)}  # its pool/ before the installed one
        runs["leakypool_baseline"] = ([sys.executable, "-m", "bench.bench_pool", *quick], baseline, env)
    runs["processpool"] = ([peer, "bench_processpool.py", *quick], PEERS, None)
    runs["grpc_stream"] = ([peer, "bench_grpc_floor.py"], PEERS, None)
    if args.peer_python and not args.skip_wool:
        runs["wool"] = ([peer, "bench_wool.py", "--skip-tuned", *quick], PEERS, None)
    if args.ray_dask_python:
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        runs["ray"] = ([args.ray_dask_python, "bench_ray.py", *quick], PEERS, env)
        runs["dask"] = ([args.ray_dask_python, "bench_dask.py", "--skip-tuned", *quick], PEERS, None)
    return runs


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for workload, spec in WORKLOADS.items():
        per_runtime: dict[str, list[float]] = {}
        for name in rounds[0]:
            read = spec["read"].get("leakypool" if name.startswith("leakypool") else name)
            if read is None:
                continue
            values = [read(r[name]) for r in rounds]
            if all(v is not None for v in values):
                per_runtime[name] = values
        entry: dict[str, Any] = {
            "better": spec["better"],
            "median": {k: statistics.median(v) for k, v in per_runtime.items()},
        }
        ours = [k for k in per_runtime if k.startswith("leakypool")]
        ratios: dict[str, Any] = {}
        for mine in ours:
            for peer, values in per_runtime.items():
                if peer.startswith("leakypool") and peer == mine:
                    continue
                per_round = [m / p for m, p in zip(per_runtime[mine], values, strict=True) if p]
                if not per_round:
                    continue  # the peer measured 0 every round (a CPU figure under one clock tick)
                ratios[f"{mine}/{peer}"] = {
                    "median": round(statistics.median(per_round), 3),
                    "range": [round(min(per_round), 3), round(max(per_round), 3)],
                }
        entry["ratios"] = ratios
        out[workload] = entry
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="1/10 sizes")
    parser.add_argument("--tcp-too", action="store_true", help="also leakypool with local workers over TCP")
    parser.add_argument(
        "--no-template-too", action="store_true", help="also leakypool with each worker a fresh interpreter"
    )
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also leakypool from another checkout (e.g. `git worktree add DIR <commit>`): before/after in one run",
    )
    parser.add_argument(
        "--peer-python", help="python of a venv with wool==0.15.7 and uvloop (default: this one, no wool)"
    )
    parser.add_argument("--make-peer-venv", metavar="DIR", help="create that venv and exit")
    parser.add_argument("--skip-wool", action="store_true")
    parser.add_argument(
        "--ray-dask-python",
        metavar="PY",
        help="python of a venv with ray, dask, distributed, uvloop and psutil: also Ray and Dask",
    )
    args = parser.parse_args()
    if args.make_peer_venv:
        subprocess.run([sys.executable, "-m", "venv", args.make_peer_venv], check=True)
        pip = pathlib.Path(args.make_peer_venv) / "bin" / "pip"
        subprocess.run([str(pip), "install", "-q", "wool==0.15.7", "uvloop", "grpcio"], check=True)
        return
    if args.rounds < 1:
        parser.error("--rounds: expected at least 1")
    runs = commands(args)
    rounds = []
    for number in range(args.rounds):
        print(f"[compare] round {number + 1}/{args.rounds}", file=sys.stderr, flush=True)
        rounds.append({name: run_json(cmd, cwd, env) for name, (cmd, cwd, env) in runs.items()})
        print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)  # kept even if the summary fails
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "quick": args.quick,
                "runtimes": list(runs),
                "workloads": summarize(rounds),
                "raw": rounds,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
