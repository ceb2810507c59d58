"""Run leakypool's benchmarks beside the peers' in one sitting and print the ratios.

Peers (``../shared/bench-peers``): wool 0.15.7, ProcessPoolExecutor, and a
bare grpc.aio echo (the floor for any gRPC design). They run in their own
virtualenv (``--peer-python``, built by ``--make-peer-venv``), one after
another, never at the same time as ours, so they do not share the 2 cores.

    python -m bench.compare --make-peer-venv /tmp/venv-wool
    python -m bench.compare --peer-python /tmp/venv-wool/bin/python [--quick]

Prints one JSON object: each runtime's figures and ``ratios`` against the
DESIGN.md targets.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
PEERS = ROOT.parent / "shared" / "bench-peers"


def run_json(cmd: list[str], cwd: pathlib.Path, timeout: float = 1800) -> dict[str, Any]:
    print(f"[compare] {' '.join(cmd)}", file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=True).stdout
    return json.loads(out[out.index("{") :])


def ratios(ours: dict[str, Any], wool: dict[str, Any] | None, floor: dict[str, Any] | None) -> dict[str, Any]:
    r: dict[str, Any] = {}
    if floor:
        r["a_p50_vs_grpc_bidi_stream"] = round(ours["a_noop_latency"]["p50_us"] / floor["stream_rtt_p50_us"], 2)
        r["a_p50_vs_grpc_unary"] = round(ours["a_noop_latency"]["p50_us"] / floor["unary_rtt_p50_us"], 2)
        r["d_p50_vs_grpc_bidi_stream"] = round(ours["d_echo_1mib"]["p50_ms"] / floor["stream_1mib_p50_ms"], 2)
        r["d_p50_vs_grpc_unary"] = round(ours["d_echo_1mib"]["p50_ms"] / floor["unary_1mib_p50_ms"], 2)
    if wool:
        r["a_wool_p50_over_ours"] = round(wool["a_noop_latency"]["p50_us"] / ours["a_noop_latency"]["p50_us"], 1)
        r["b_tasks_per_s_vs_wool"] = round(
            ours["b_noop_throughput"]["tasks_per_s"] / wool["b_noop_throughput"]["tasks_per_s"], 1
        )
        r["c_tasks_per_s_vs_wool"] = round(
            ours["c_sleep_throughput"]["tasks_per_s"] / wool["c_sleep_throughput"]["tasks_per_s"], 1
        )
    r["e_first_result_s"] = ours["e_cold_start_first"]["first_result_s"]
    r["targets"] = {
        "a_p50_vs_grpc_bidi_stream": "<= 1.5",
        "b_tasks_per_s_vs_wool": ">= 5",
        "c_tasks_per_s_vs_wool": ">= 5",
        "d_p50_vs_grpc_bidi_stream": "<= 1.5",
        "e_first_result_s": "< 0.25",
    }
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer-python", help="python of a venv with wool==0.15.7 and uvloop")
    parser.add_argument("--make-peer-venv", metavar="DIR", help="create that venv and exit")
    parser.add_argument("--quick", action="store_true", help="1/10 sizes (smoke run)")
    parser.add_argument("--skip-wool", action="store_true", help="only the bare gRPC floor")
    args = parser.parse_args()
    if args.make_peer_venv:
        subprocess.run([sys.executable, "-m", "venv", args.make_peer_venv], check=True)
        pip = pathlib.Path(args.make_peer_venv) / "bin" / "pip"
        subprocess.run([str(pip), "install", "-q", "wool==0.15.7", "uvloop"], check=True)
        return
    quick = ["--quick"] if args.quick else []
    result: dict[str, Any] = {"leakypool": run_json([sys.executable, "-m", "bench.bench_pool", *quick], ROOT)}
    result["balancer"] = run_json([sys.executable, "-m", "bench.bench_balancer"], ROOT)
    peer = args.peer_python
    if peer:
        result["grpc_floor"] = run_json([peer, "bench_grpc_floor.py"], PEERS)
        if not args.skip_wool:
            result["wool"] = run_json([peer, "bench_wool.py", "--skip-tuned", *quick], PEERS)
    result["ratios"] = ratios(result["leakypool"], result.get("wool"), result.get("grpc_floor"))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
