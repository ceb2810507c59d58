"""A dispatching process whose owner lease ran out while it held jobs, on real SQLite files and real workers.

While the lease is out, another process may take what it held (`recover`)
and run it to its end. The first process, once it reaches the store again,
must never start such a job: it would run a job whose outcome is already
committed (what the failover soak caught on CI: ``ran_after_its_outcome_committed``).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.routines import common as routines
from tests.integration.support.signals import Signals

pytestmark = pytest.mark.integration


async def test_a_job_held_through_a_lapsed_lease_should_never_start_after_another_process_ran_it(tmp_path):
    """Test a held job (its worker busy) that another process ran while the holder's lease was out: it runs once."""
    import pool
    from backpressure import TaskCountBackpressure

    class RenewalsFail(pool.SQLiteStore):
        """A real SQLite store whose owner lease renewals fail, as a lost connection does, while ``away``."""

        away = False

        async def heartbeat(self, owner: str, now: float, ttl: float) -> None:
            if self.away:
                error = pool.StoreError(f"store {self.url}: ConnectionResetError: out of reach")
                error.__cause__ = ConnectionResetError("out of reach")
                raise error
            await super().heartbeat(owner, now, ttl)

    path = str(tmp_path / "jobs.db")
    store = RenewalsFail(path)
    gate = tmp_path / "gate"
    async with Signals() as signals:
        async with pool.WorkerPool(
            spawn=1, backpressure=TaskCountBackpressure(1), store=store, lease_ttl=1.5, store_retry=60
        ):
            busy = asyncio.ensure_future(routines.hold_until(str(gate), signals.address, "busy"))  # (not a job)
            await signals.wait("start busy")  # the one slot is taken: a job waits here, held by this process
            job = await routines.mark.submit(str(tmp_path), "x")
            store.away = True  # from now on its lease runs out: another process may take the job
            async with pool.WorkerPool(spawn=1, store=f"sqlite:///{path}", lease_ttl=1.5) as second:
                taken = await second.jobs.get(job.id)
                assert taken is not None and await taken.result(timeout=60) == "x"  # ran there, outcome committed
            assert routines.executions(str(tmp_path), "x") == (1, 1)
            store.away = False  # the first process reaches the store again, then its slot frees
            gate.touch()
            assert await asyncio.wait_for(busy, 60) == "busy"
            # Its next job goes through the one slot after anything it still held: the held job, had it kept it.
            assert await (await routines.mark.submit(str(tmp_path), "y")).result(timeout=60) == "y"
            assert await job.result(timeout=60) == "x"
    assert routines.executions(str(tmp_path), "x") == (1, 1)  # started once, by the second process
