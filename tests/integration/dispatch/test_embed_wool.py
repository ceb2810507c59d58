"""Our balancer and backpressure hook, unchanged, inside the wool library's WorkerPool.

wool (PyPI, an optional extra: ``pip install leakypool[wool]``) has the
same plug-in shapes on purpose. Here 4 wool workers, each capped at one
task by our TaskCountBackpressure, take work from 2 concurrent callers in
the order of our PriorityLoadBalancer: only the two lowest-uid workers run.
"""

from __future__ import annotations

import asyncio
import collections
import functools
from multiprocessing import resource_tracker

import pytest

from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer
from tests.integration.support.helpers import eventually

wool = pytest.importorskip("wool", reason="the wool extra is not installed (pip install -e '.[wool]')")

pytestmark = pytest.mark.integration


async def test_priority_and_task_count_should_concentrate_load_in_wool():
    from tests.integration.routines import wool_routines

    worker = functools.partial(wool.LocalWorker, backpressure=TaskCountBackpressure(1))
    async with wool.WorkerPool(spawn=4, worker=worker, loadbalancer=PriorityLoadBalancer()):
        await wool_routines.short_task(0)  # wool connects lazily: the first dispatch starts it
        proxy = wool.__proxy__.get()
        await eventually(lambda: len(proxy.workers) >= 4, timeout=60, interval=0.05)  # wool has no membership event
        by_uid = sorted(proxy.workers, key=lambda m: m.uid.int)
        ran_on: collections.Counter[int] = collections.Counter()

        async def caller() -> None:
            for _ in range(40):
                ran_on[await wool_routines.short_task(0.01)] += 1

        await asyncio.gather(caller(), caller())
    # wool's shared memory started multiprocessing's resource tracker, a
    # child of this process; stop it so the no-leak check stays strict.
    resource_tracker._resource_tracker._stop()
    assert sum(ran_on.values()) == 80
    assert set(ran_on) <= {by_uid[0].pid, by_uid[1].pid}
    assert ran_on[by_uid[0].pid] >= 40
