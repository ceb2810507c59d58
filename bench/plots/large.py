"""Time vs size, log-log, for large values (workload (s)): leakypool, ProcessPoolExecutor and the memory floor.

    python -m bench.bench_large > large.json && python -m bench.plots.large large.json [more.json ...] [--out docs/large-values.png]

Reads `bench.bench_large`'s JSON and draws the p50 of echo calls of float64
arrays against their size, with the floor (two ``np.copyto`` into touched
memory, from the first file). Further files from the same sitting add their
runners: ``bench_large --grpc`` (leakypool over gRPC, bare grpc.aio) and
``bench/peer_large_ray.py`` (Ray). Needs the ``plot`` extra (matplotlib).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def series(result: dict[str, Any], runner: str) -> tuple[list[int], list[float]]:
    """(sizes in MiB, p50 ms) of ``runner``'s array echoes that succeeded."""
    rows = [
        r
        for r in result["rows"]
        if r["runner"] == runner and r["payload"] == "array" and r["call"] == "echo" and r["p50_ms"] is not None
    ]
    rows.sort(key=lambda r: r["mib"])
    return [r["mib"] for r in rows], [r["p50_ms"] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", type=Path, nargs="+", help="bench_large's JSON output (more: same sitting)")
    parser.add_argument("--out", type=Path, default=Path("docs/large-values.png"), help="the PNG to write")
    args = parser.parse_args()
    results = [json.loads(path.read_text()) for path in args.result]
    result = {"floor": results[0]["floor"], "rows": [row for one in results for row in one["rows"]]}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"leakypool": "o-", "ProcessPoolExecutor": "s--", "Ray": "^-.", "leakypool-grpc": "o--"}
    runners = dict.fromkeys(row["runner"] for row in result["rows"])  # in the order they came
    for runner in runners:
        sizes, p50 = series(result, runner)
        if sizes:
            ax.plot(sizes, p50, styles.get(runner, "x:"), label=runner)
    floor = sorted((int(mib), f["two_copies_ms"]) for mib, f in result["floor"].items())
    ax.plot([m for m, _ in floor], [ms for _, ms in floor], "k:", label="floor: two np.copyto")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("float64 array, MiB")
    ax.set_ylabel("echo p50, ms")
    ax.set_title("A large argument to a local worker and back (workload s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(json.dumps({"wrote": str(args.out)}))


if __name__ == "__main__":
    main()
