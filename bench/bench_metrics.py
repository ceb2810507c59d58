"""What metrics cost per call: in-memory calls with and without ``metrics_port``, interleaved rounds.

    python -m bench.bench_metrics [--quick] [--rounds 5]

Per round, on two pools (``spawn=2``) opened side by side: (b) 10,000 no-op
calls, 256 in flight, and (a) 1,000 sequential no-op calls, without and with
metrics (which goes first alternates). Reports the medians, the median of
the per-round ratios, the dispatching process's CPU per call in each case
(``time.process_time``), and the CPU of the metric updates alone, which the
machine's noise does not drown.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx
import uvloop

import pool
from bench.support import routines
from bench.support.workloads import TP_CALLS, TP_CONCURRENCY, WORKERS, concurrent, log, percentile, sequential


async def measure(p: pool.WorkerPool, total: int, n_seq: int) -> dict[str, float]:
    with _using(p):
        cpu0 = time.process_time()
        elapsed, errors = await concurrent(routines.noop, total, TP_CONCURRENCY)
        cpu = time.process_time() - cpu0
        assert not errors, errors
        samples = await sequential(routines.noop, n_seq)
    return {"tps": total / elapsed, "cpu_us_per_call": cpu / total * 1e6, "p50_us": percentile(samples, 50) * 1e6}


class _using:
    """Make ``p`` the pool routines dispatch to (the innermost entered pool is the current one)."""

    def __init__(self, p: pool.WorkerPool) -> None:
        self.p = p

    def __enter__(self) -> None:
        from pool._call._dispatcher import reset_dispatcher, set_dispatcher

        self.token = set_dispatcher(self.p)
        self._reset = reset_dispatcher

    def __exit__(self, *exc: object) -> None:
        self._reset(self.token)


async def main(total: int, n_seq: int, rounds: int) -> dict[str, object]:
    off_runs, on_runs = [], []
    async with pool.WorkerPool(spawn=WORKERS) as off, pool.WorkerPool(spawn=WORKERS, metrics_port=0) as on:
        for p in (off, on):
            with _using(p):
                await concurrent(routines.noop, 1000, TP_CONCURRENCY)  # warm up
        for r in range(rounds):
            log(f"round {r + 1}/{rounds}")
            if r % 2:  # alternate which goes first: the machine drifts within a round too
                on_runs.append(await measure(on, total, n_seq))
                off_runs.append(await measure(off, total, n_seq))
            else:
                off_runs.append(await measure(off, total, n_seq))
                on_runs.append(await measure(on, total, n_seq))
        address = on.metrics_address
        if address is None:
            raise RuntimeError("the pool with metrics_port=0 serves no /metrics")
        host, port = address
        async with httpx.AsyncClient() as client:
            scraped = (await client.get(f"http://{host}:{port}/metrics")).text
    calls_counted = sum(
        float(line.split()[-1]) for line in scraped.splitlines() if line.startswith("leakypool_calls_total{")
    )

    def med(runs: list[dict[str, float]], key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 1)

    return {
        "runtime": "leakypool calls, metrics off vs on",
        "rounds": rounds,
        "off": {k: med(off_runs, k) for k in ("tps", "cpu_us_per_call", "p50_us")},
        "on": {k: med(on_runs, k) for k in ("tps", "cpu_us_per_call", "p50_us")},
        "on_over_off_tps_median": round(
            statistics.median(b["tps"] / a["tps"] for a, b in zip(off_runs, on_runs, strict=False)), 3
        ),
        "on_over_off_p50_median": round(
            statistics.median(b["p50_us"] / a["p50_us"] for a, b in zip(off_runs, on_runs, strict=False)), 3
        ),
        "cpu_us_per_call_added_median": round(
            statistics.median(
                b["cpu_us_per_call"] - a["cpu_us_per_call"] for a, b in zip(off_runs, on_runs, strict=False)
            ),
            2,
        ),
        "calls_counted_by_metrics": calls_counted,
        "update_us_per_call": update_cost_us(),
    }


def update_cost_us(n: int = 200_000) -> float:
    """CPU of the per-call metric updates alone (accept + end), measured without the noise of a pool."""
    from types import SimpleNamespace

    from pool._observe._metrics import PoolMetrics
    from pool._transport._proto import leakypool_pb2 as pb

    metrics = PoolMetrics(lambda: None, lambda: None)  # type: ignore[arg-type,return-value]
    call = SimpleNamespace(cancelled_here=False, final=pb.Frame(outcome=pb.Outcome(kind=pb.Outcome.RETURN)))
    t0 = time.process_time()
    for _ in range(n):
        metrics.ended(call, "noop", metrics.accepted("noop", 0.0))  # type: ignore[arg-type]
    return round((time.process_time() - t0) / n * 1e6, 3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    print(json.dumps(uvloop.run(main(TP_CALLS // scale, 1000 // scale, args.rounds)), indent=2))
