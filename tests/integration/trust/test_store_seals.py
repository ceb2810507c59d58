"""Issue 51, items 1-2: what a store keeps is sealed, so a database role without the secret runs nothing.

Each test plays a finding with a real second party: a PostgreSQL role with
only the grants the finding names (``INSERT`` on the jobs table, ``UPDATE``
of the outcome column), writing rows built with the standard ``pickle``
module. The marker file a planted pickle would create (``os.system``) must
never appear, the job must end failed with a clear error, and genuine jobs
keep running beside it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import time
import uuid

import pytest

import pool
from pool._transport._proto import leakypool_pb2 as pb
from tests.integration.routines import common as routines
from tests.integration.support.strangers import NOBODY, needs_root, run_as_nobody, shared_directory
from tests.integration.support.workers import worker

pytestmark = pytest.mark.integration

WAIT_S = 60.0
"""Bound on every wait for a job to end."""

ROLE, ROLE_PASSWORD = "planter", "plant3r"


class Planted:
    """What a planter writes: unpickling it runs a shell command (here: one that creates a marker file)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


async def as_role(postgres_server, postgres_url: str, grants: list[str]):
    """An asyncpg connection as a role that holds only ``grants`` on the store's tables."""
    import asyncpg

    database = postgres_url.rsplit("/", 1)[1]
    postgres_server.psql(
        f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{ROLE}') "
        f"THEN CREATE ROLE {ROLE} LOGIN PASSWORD '{ROLE_PASSWORD}'; END IF; END $$"
    )
    for grant in grants:
        postgres_server.psql(f"GRANT {grant} TO {ROLE}", database=database)
    return await asyncpg.connect(
        f"postgresql://{ROLE}:{ROLE_PASSWORD}@127.0.0.1:{postgres_server.port}/{database}", timeout=30
    )


async def plant(connection, job_id: str, payload: bytes) -> None:
    """Insert a due pending job row, as a role with INSERT alone can."""
    now = time.time()
    await connection.execute(
        "INSERT INTO leakypool_jobs (id, routine, state, max_attempts, created_at, deadline, next_at, payload) "
        "VALUES ($1, 'tests.integration.routines.common.add', 'pending', 1, $2, $3, $2, $4)",
        job_id,
        now,
        now + 600,
        payload,
    )


async def ended(p: pool.WorkerPool, job_id: str) -> pool.Job:
    async with asyncio.timeout(WAIT_S):
        while True:
            job = await p.jobs.get(job_id)
            if job is not None and job.done:
                return job
            await asyncio.sleep(0.05)


async def test_a_row_planted_by_a_role_with_insert_alone_should_never_run_and_fail_clearly(
    postgres_server, postgres_url, tmp_path, caplog
):
    """Test finding 1: a hostile payload, and a genuine payload copied to a row of the planter's, run nowhere."""
    marker = tmp_path / "ran"
    caplog.set_level(logging.WARNING)
    async with pool.WorkerPool(spawn=1, store=postgres_url) as p:
        genuine = await routines.add.submit(1, 2)
        assert await genuine.result(timeout=WAIT_S) == 3
        planter = await as_role(postgres_server, postgres_url, ["INSERT ON leakypool_jobs"])
        try:
            # A payload built with the standard pickle module: it would run as it is decoded.
            await plant(planter, "hostile", pickle.dumps((1, Planted(str(marker)))))
            # A genuine, sealed payload copied into another job's row: the seal names the job it was made for.
            stored = await p.jobs.store.get(genuine.id)
            await plant(planter, "copied", stored.payload)
        finally:
            await planter.close()
        for job_id, why in [("hostile", "is not sealed"), ("copied", "was not written by a holder of")]:
            job = await ended(p, job_id)
            assert job.state == "failed" and job.attempts == 0, job
            assert f"the payload of job {job_id} {why}" in job.error
            with pytest.raises(pool.SerializationError, match=f"job {job_id}"):
                await job.result(timeout=WAIT_S)
        assert await (await routines.add.submit(2, 3)).result(timeout=WAIT_S) == 5  # genuine jobs keep running
    assert not marker.exists()


async def test_an_outcome_changed_by_a_role_with_update_of_it_should_load_nothing(
    postgres_server, postgres_url, tmp_path
):
    """Test finding 2: result() of a job whose outcome another role rewrote raises, and runs nothing."""
    marker = tmp_path / "ran"
    async with pool.WorkerPool(spawn=1, store=postgres_url) as p:
        job = await routines.add.submit(1, 2)
        assert await job.result(timeout=WAIT_S) == 3
        planter = await as_role(
            postgres_server, postgres_url, ["SELECT (id) ON leakypool_jobs", "UPDATE (outcome) ON leakypool_jobs"]
        )
        try:
            forged = pb.Outcome(kind=pb.Outcome.RETURN, value=pickle.dumps(Planted(str(marker))))
            await planter.execute(
                "UPDATE leakypool_jobs SET outcome = $2 WHERE id = $1", job.id, forged.SerializeToString()
            )
        finally:
            await planter.close()
        again = await p.jobs.get(job.id)
        with pytest.raises(pool.SerializationError, match=f"the outcome of job {job.id} is not sealed"):
            await again.result(timeout=WAIT_S)
    assert not marker.exists()


async def test_a_process_with_another_secret_should_say_so_at_start(postgres_url, tmp_path, caplog):
    """Test that pending rows sealed under another secret are named loudly at start, with the fix."""
    other = tmp_path / "other-secret"
    other.write_text("another secret\n")
    other.chmod(0o600)
    async with pool.WorkerPool(spawn=0, store=postgres_url, secret_file=str(other), dispatch_deadline=600) as p:
        await routines.add.submit(1, 2)  # pending: no worker here
        assert (await p.jobs.counts()).get("pending") == 1
    caplog.set_level(logging.ERROR, logger="leakypool.jobs")
    async with pool.WorkerPool(spawn=0, store=postgres_url, dispatch_deadline=600):
        pass
    (line,) = [r.getMessage() for r in caplog.records if "carry no seal of this process's secret" in r.getMessage()]
    assert "1 of the 1 oldest pending jobs" in line and "share a secret" in line and "secret_file" in line


@needs_root
async def test_a_sqlite_store_another_user_made_first_should_be_refused(tmp_path):
    """Test finding 3: ``nobody`` makes ``app-jobs.db`` (0666) in a sticky shared directory before the pool starts;
    the pool refuses it (and would refuse the directory even if the file were not there yet)."""
    with shared_directory() as shared:
        plant_db = (
            "import os, sqlite3\n"
            "os.umask(0)\n"
            "sqlite3.connect('app-jobs.db').execute('CREATE TABLE planted (x)').connection.commit()\n"
        )
        assert await run_as_nobody(shared, "plant.py", plant_db) == 0
        path = os.path.join(shared, "app-jobs.db")
        assert os.stat(path).st_uid == NOBODY
        with pytest.raises(pool.ConfigError, match=r"is writable by other users \(mode 1777\).*not /tmp"):
            async with pool.WorkerPool(spawn=1, store=f"sqlite:///{path}"):
                pass
        with pytest.raises(pool.ConfigError, match="is writable by other users"):
            async with pool.WorkerPool(spawn=1, store=f"sqlite:///{shared}/not-yet.db"):
                pass
        assert not os.path.exists(os.path.join(shared, "not-yet.db"))


async def test_a_registry_flooded_by_a_role_with_insert_alone_should_admit_only_the_genuine_worker(
    postgres_server, postgres_url, caplog
):
    """Test finding 6, scaled down (the full size is bench/): never-expiring unsealed rows and one 52 MB row from a
    role with INSERT alone add no member and are named in one log line; the genuine worker serves at once."""
    caplog.set_level(logging.WARNING, logger="leakypool.discovery")
    async with worker("--port", "0", "--registry", postgres_url) as w:
        planter = await as_role(postgres_server, postgres_url, ["INSERT ON leakypool_workers"])
        try:
            record = {"address": "127.0.0.1:9", "pid": 1, "tls": False}
            await planter.executemany(
                "INSERT INTO leakypool_workers (uid, record, expires_at) VALUES ($1, $2, 'infinity')",
                [(str(u), json.dumps(record | {"uid": str(u)})) for u in (uuid.UUID(int=i) for i in range(1, 501))],
            )
            await planter.execute(
                "INSERT INTO leakypool_workers (uid, record, expires_at) VALUES ('big', $1, 'infinity')",
                "x" * (52 << 20),
            )
        finally:
            await planter.close()
        async with pool.WorkerPool(discovery=pool.StoreDiscovery(postgres_url, poll_interval=0.1)) as p:
            await p.wait_for_workers(1, timeout=WAIT_S)
            assert await routines.pid() == w.pid
            assert list(p.workers) == [uuid.UUID(w.uid)]
        (line,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
        assert "skipped 500 row(s) not sealed" in line and "1 over 4096 bytes" in line
