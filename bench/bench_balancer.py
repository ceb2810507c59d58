"""Workload (f): time from delegate() to the first candidate, at 10 / 100 / 1,000 workers.

Measured for both built-in balancers over two contexts: leakypool's own
pool view (which keeps an ascending-uid snapshot) and a plain read-only
mapping (what another pool, such as wool's, offers). Prints one JSON object.

    python -m bench.bench_balancer
"""

from __future__ import annotations

import asyncio
import json
import time
import types
import uuid

from balancer import PriorityLoadBalancer, RoundRobinLoadBalancer
from pool._base._ids import new_uid
from pool._dispatch._roster import Roster

SIZES = (10, 100, 1_000)
ROUNDS = 2_000


class PlainContext:
    """A pool view with only the protocol's ``workers`` mapping."""

    def __init__(self, uids: list[uuid.UUID]) -> None:
        self.workers = types.MappingProxyType({uid: (None, None) for uid in uids})


def leakypool_context(uids: list[uuid.UUID]) -> Roster:
    members = Roster()
    for uid in uids:
        members.add(types.SimpleNamespace(metadata=types.SimpleNamespace(uid=uid)))  # type: ignore[arg-type]
    return members


async def first_candidate_us(balancer, context) -> dict[str, float]:
    samples = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        gen = balancer.delegate(None, context=context)
        await anext(gen)
        samples.append(time.perf_counter() - t0)
        await gen.aclose()
    samples.sort()
    return {
        "p50_us": round(samples[len(samples) // 2] * 1e6, 2),
        "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6, 2),
    }


async def main() -> dict[str, object]:
    result: dict[str, object] = {"rounds": ROUNDS}
    for n in SIZES:
        uids = [new_uid() for _ in range(n)]
        for name, make in (("leakypool_context", leakypool_context), ("plain_mapping", PlainContext)):
            context = make(uids)
            for balancer in (PriorityLoadBalancer(), RoundRobinLoadBalancer()):
                key = f"f_{type(balancer).__name__}_{name}_{n}"
                result[key] = await first_candidate_us(balancer, context)
    result["target"] = "PriorityLoadBalancer, leakypool_context, 1000 workers: p50 < 50 us"
    return result


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
