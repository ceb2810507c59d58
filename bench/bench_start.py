"""Cold start of a pool's workers, by how they start: `WorkerPool(spawn=N)` entry to first result.

Modes, interleaved in rounds (one of each per round, each in a fresh
process, so every start is cold and the process has no thread):
``fork`` (the template is a fork of this process: the default), ``interpreter``
(the template is a fresh interpreter: ``LEAKYPOOL_TEMPLATE_FORK=0``) and
``none`` (each worker a fresh interpreter: ``LEAKYPOOL_WORKER_TEMPLATE=0``).

    python -m bench.bench_start [--spawn 2 8] [--rounds 5]

Prints JSON: per spawn count and mode, the median seconds and each round's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = {
    "fork": {},
    "interpreter": {"LEAKYPOOL_TEMPLATE_FORK": "0"},
    "none": {"LEAKYPOOL_WORKER_TEMPLATE": "0"},
}


def once(spawn: int) -> float:
    """One cold start in this process: seconds from entry to the first result."""
    import uvloop

    import pool
    from bench.support import routines

    async def run() -> float:
        t0 = time.perf_counter()
        async with pool.WorkerPool(spawn=spawn, shutdown_grace=1):
            await routines.noop()
            return time.perf_counter() - t0

    return uvloop.run(run())


def measure(spawn: int, mode: str) -> float:
    env = {**os.environ, **MODES[mode]}
    code = f"from bench.bench_start import once; print(once({spawn}))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawn", type=int, nargs="+", default=[2, 8])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    runs: dict[str, dict[str, list[float]]] = {str(n): {m: [] for m in MODES} for n in args.spawn}
    for number in range(args.rounds):
        print(f"[start] round {number + 1}/{args.rounds}", file=sys.stderr, flush=True)
        for n in args.spawn:
            for mode in MODES:
                runs[str(n)][mode].append(round(measure(n, mode), 4))
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "first_result_s": {
                    n: {m: {"median": statistics.median(v), "rounds": v} for m, v in modes.items()}
                    for n, modes in runs.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
