"""The job store contract for rate limits (`pool.RateLimit` held in the store), run against every backend.

Part of the contract suite in test_store.py (its helpers; the backends are conftest.py's): a rate holds across owners, and a job given
back unstarted, however it goes back, gives back the slot its lease took.
"""

from __future__ import annotations

import pytest

from tests.unit.pool._jobs.test_store import NOW, job, opened


class TestJobStoreRates:
    async def test_lease_should_hold_a_rate_across_owners_and_set_the_next_due_time_of_what_it_holds_back(
        self, backend, tmp_path
    ):
        """Test RateLimit in the store: n leases per window per queue and key, whoever leases; the rest wait, due later."""
        async with opened(backend, tmp_path) as store:
            rated = {"queue": "api", "concurrency": 10, "rate": 2, "rate_per": 10.0}
            for i in range(5):
                await store.submit(job(f"t{i}", created=NOW + i / 10, key="t", **rated))
            await store.submit(job("u0", created=NOW, key="u", **rated))
            assert [j.id for j in await store.lease("one", 100, NOW + 1)] == ["t0", "u0", "t1"]
            assert await store.lease("two", 100, NOW + 2) == []  # key t: 2 in the last 10 s, whoever asks
            held = {j.id: j.next_at for j in await store.list() if j.owner == ""}
            assert held == dict.fromkeys(["t2", "t3", "t4"], NOW + 11)  # due when the first lease leaves the window
            assert await store.oldest_due(NOW + 2) == NOW + 11
            assert [j.id for j in await store.lease("two", 100, NOW + 11)] == ["t2", "t3"]
            assert await store.lease("one", 100, NOW + 11.5) == []
            assert [j.id for j in await store.lease("one", 100, NOW + 21)] == ["t4"]

    async def test_a_lease_given_back_before_it_started_should_give_back_its_rate_slot(self, backend, tmp_path):
        """Test unlease with rate limits: a job given back (no worker for it) did not use its slot; one that ran did."""
        async with opened(backend, tmp_path) as store:
            rated = {"queue": "api", "concurrency": 10, "rate": 2, "rate_per": 10.0}
            for i in range(4):
                await store.submit(job(f"t{i}", created=NOW + i / 10, key="t", **rated))
            assert [j.id for j in await store.lease("one", 1, NOW + 1)] == ["t0"]
            assert await store.mark_running("t0", "one", NOW + 1)
            assert await store.retry("t0", "one", NOW, "again")  # it started: its slot stays used
            assert [j.id for j in await store.lease("one", 1, NOW + 1.5)] == ["t0"]  # its second attempt
            await store.unlease("one", ["t0"])  # given back unstarted: this lease's slot only
            await store.unlease("one", ["t0"])  # again (a retried call): nothing more given back
            assert [j.id for j in await store.lease("two", 100, NOW + 2)] == ["t0"]  # 1 start in the window: room for 1
            await store.unlease("nobody", ["t0"])  # not its owner: no change, no slot given back
            assert await store.lease("two", 100, NOW + 2.5) == []
            await store.unlease("two", ["t0"])
            assert [j.id for j in await store.lease("three", 100, NOW + 3)] == ["t0"]

    @pytest.mark.parametrize("how", ["release_owner", "recover", "reconcile"])
    async def test_every_give_back_of_a_leased_job_should_give_back_its_rate_slot(self, backend, tmp_path, how):
        """Test the other ways a job goes back unstarted: a clean shutdown, a dead owner, a lease in doubt."""
        async with opened(backend, tmp_path) as store:
            rated = {"queue": "api", "concurrency": 10, "rate": 1, "rate_per": 10.0}
            for i in range(2):
                await store.submit(job(f"t{i}", created=NOW + i / 10, key="t", **rated))
            await store.heartbeat("one", NOW, 1)
            assert [j.id for j in await store.lease("one", 100, NOW + 0.5)] == ["t0"]  # 1 per 10 s: t1 held back
            if how == "release_owner":
                await store.release_owner("one", NOW + 1)
            elif how == "recover":
                await store.recover(NOW + 2)  # its owner lease ran out at NOW + 1
            else:
                assert await store.reconcile("one", [], NOW + 1) == (["t0"], [])
            assert [j.id for j in await store.lease("two", 100, NOW + 3)] == ["t0"]  # t0's slot, given back with it
