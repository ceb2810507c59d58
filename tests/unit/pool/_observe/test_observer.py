"""Tests for pool._observe._observer: a pool's /status document and /metrics, over a real port on 127.0.0.1.

The pool is a stand-in with a pool's read-only surface (stats, workers, worker_states, jobs): what the
observer reads is its own logic (which figures, when the store is asked, what is kept when it is away).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import types
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pool._errors import ConfigError, StoreError
from pool._observe import _observer
from pool._observe._observer import ERROR_SHOWN_CHARS, FAILED_SHOWN, PoolObserver
from pool._observe._stats import GateStats, PoolStats
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import WorkerMetadata

A, B = uuid.UUID(int=2), uuid.UUID(int=1)


def failed_job(n: int, error: str = "ValueError: bad") -> types.SimpleNamespace:
    return types.SimpleNamespace(
        id=f"job-{n}", routine="tasks.resize", queue="images", attempts=3, finished_at=1700000000.0 + n, error=error
    )


class Store:
    """The job store's one read the observer makes (the latest failures), counted."""

    def __init__(self, jobs: Jobs) -> None:
        self._jobs = jobs
        self.lists: list[tuple[str, int, bool]] = []

    async def list(self, state: str, limit: int, *, newest: bool) -> list[types.SimpleNamespace]:
        self.lists.append((state, limit, newest))
        return self._jobs.failed[:limit]


class Jobs:
    """A pool's ``jobs``: counts, paused queues and the store, each able to fail or hang as a store does."""

    def __init__(self) -> None:
        self.counts_now: dict[str, int] = {"queued": 4, "failed": 1}
        self.paused_now: list[str] = ["images"]
        self.failed = [failed_job(1)]
        self.purged = 6
        self.store = Store(self)
        self.fault: BaseException | None = None
        self.paused_fault: BaseException | None = None
        self.hang = False

    async def counts(self) -> dict[str, int]:
        if self.hang:
            await asyncio.Event().wait()
        if self.fault is not None:
            raise self.fault
        return dict(self.counts_now)

    async def paused(self) -> list[str]:
        if self.paused_fault is not None:
            raise self.paused_fault
        return list(self.paused_now)


class Pool:
    """The read-only surface of a `WorkerPool` the observer uses."""

    def __init__(self, *, store: bool = True) -> None:
        self.has_store = store
        self.jobs = Jobs()
        self.workers = {
            A: WorkerMetadata(
                uid=A, address="127.0.0.1:7001", pid=11, capacity=8, local=True, build="v2", interpreter="cpython-3.13"
            ),
            B: WorkerMetadata(uid=B, address="10.0.0.2:7000", pid=22, capacity=3),
        }
        self.states = {
            A: pb.WorkerState(
                uid=str(A),
                in_flight=2,
                capacity=4,
                idle_seconds=1.23456,
                accepting=True,
                memory_bytes=1 << 20,
                loop_lag_seconds=0.001234,
            )
        }
        self.asked: list[float] = []

    def stats(self) -> PoolStats:
        return PoolStats(
            workers=2,
            local_workers=1,
            admitted=5,
            running=2,
            waiting_for_worker=1,
            waiting_for_limits=2,
            dispatched=40,
            rejected=3,
            capacity_timeouts=1,
            grown=0,
            limits={"queue 'images'": GateStats(running=2, waiting=2)},
            recycled={"memory": 2, "odd": 1},
        )

    async def worker_states(self, timeout: float) -> dict[uuid.UUID, pb.WorkerState]:
        self.asked.append(timeout)
        return self.states


async def get(observer: PoolObserver, path: str) -> tuple[int, bytes]:
    """GET ``path`` from the observer's port: status code and body."""
    host, port = observer.address
    async with asyncio.timeout(10):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            answer = await reader.read()
        finally:
            writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def status_over_http(observer: PoolObserver) -> dict:
    code, body = await get(observer, "/status")
    assert code == 200
    return json.loads(body)


class Serving:
    """An observer of ``pool`` on a free port of 127.0.0.1, closed on exit."""

    def __init__(self, pool: Pool, **kwargs) -> None:
        self.observer = PoolObserver(pool, 0, **kwargs)

    async def __aenter__(self) -> PoolObserver:
        await self.observer.start()
        return self.observer

    async def __aexit__(self, *exc) -> None:
        await self.observer.aclose()


class TestStatus:
    async def test_status_should_list_workers_by_uid_with_their_state_when_they_answered(self):
        """Test that each worker appears in uid order, with its live state, or its record's figures when silent."""
        pool = Pool(store=False)
        doc = await PoolObserver(pool, 0).status()
        assert pool.asked == [1.0]
        assert doc["workers"] == [
            {
                "uid": str(B),
                "address": "10.0.0.2:7000",
                "pid": 22,
                "local": False,
                "build": "",
                "interpreter": "",
                "in_flight": None,
                "capacity": 3,
                "idle_s": None,
                "accepting": None,
                "memory": None,
                "loop_lag_s": None,
            },
            {
                "uid": str(A),
                "address": "127.0.0.1:7001",
                "pid": 11,
                "local": True,
                "build": "v2",
                "interpreter": "cpython-3.13",
                "in_flight": 2,
                "capacity": 4,
                "idle_s": 1.235,
                "accepting": True,
                "memory": 1 << 20,
                "loop_lag_s": 0.0012,
            },
        ]

    async def test_status_should_carry_calls_queues_and_recycles_when_the_pool_has_no_store(self):
        """Test the pool's figures in the document, every recycle reason present, and no job figures."""
        doc = await PoolObserver(Pool(store=False), 0).status()
        assert doc["kind"] == "pool"
        assert doc["calls"] == {
            "running": 2,
            "waiting_for_worker": 1,
            "waiting_for_limits": 2,
            "dispatched": 40,
            "rejected": 3,
            "capacity_timeouts": 1,
        }
        assert doc["queues"] == {"queue 'images'": {"running": 2, "waiting": 2}}
        assert doc["recycled"] == {"tasks": 0, "memory": 2, "timeout": 0, "odd": 1}
        assert (doc["jobs"], doc["paused"], doc["failed_jobs"]) == (None, None, None)
        assert doc["rates"] == {"calls_per_s": 0.0}

    async def test_status_should_serve_the_stores_figures_when_read_through_the_port(self):
        """Test that a scrape reads job counts, paused queues and the latest failures from the store."""
        pool = Pool()
        async with Serving(pool) as observer:
            doc = await status_over_http(observer)
        assert doc["jobs"] == {"queued": 4, "failed": 1}
        assert doc["paused"] == ["images"]
        assert doc["failed_jobs"] == [
            {
                "id": "job-1",
                "routine": "tasks.resize",
                "queue": "images",
                "attempts": 3,
                "finished_at": 1700000001.0,
                "error": "ValueError: bad",
            }
        ]
        assert pool.jobs.store.lists == [("failed", FAILED_SHOWN, True)]

    async def test_status_should_not_list_failures_again_when_the_failed_count_did_not_change(self):
        """Test that the store is asked to sort its failures only when their number moved."""
        pool = Pool()
        async with Serving(pool) as observer:
            await status_over_http(observer)
            await status_over_http(observer)
            assert len(pool.jobs.store.lists) == 1
            pool.jobs.failed.insert(0, failed_job(2))
            pool.jobs.counts_now["failed"] = 2
            doc = await status_over_http(observer)
        assert len(pool.jobs.store.lists) == 2
        assert [j["id"] for j in doc["failed_jobs"]] == ["job-2", "job-1"]

    async def test_status_should_mask_passwords_and_keep_the_tail_when_a_failure_message_is_long(self):
        """Test that a failed job's error shows no password and at most ERROR_SHOWN_CHARS, its end kept."""
        pool = Pool()
        error = "connect postgresql://app:hunter2@db/app failed\n" + "x" * 1000 + "END"
        pool.jobs.failed = [failed_job(1, "postgresql://app:hunter2@db/app"), failed_job(2, error)]
        async with Serving(pool) as observer:
            doc = await status_over_http(observer)
        short, long = (j["error"] for j in doc["failed_jobs"])
        assert short == "postgresql://app:***@db/app"
        assert len(long) == ERROR_SHOWN_CHARS and long.endswith("END")
        assert "hunter2" not in json.dumps(doc)

    @pytest.mark.parametrize("fault", [StoreError("database is locked"), TimeoutError()], ids=["error", "timeout"])
    async def test_status_should_keep_the_last_job_figures_when_the_store_fails(self, fault, caplog):
        """Test that a store that fails keeps the figures last read, and is logged."""
        pool = Pool()
        async with Serving(pool) as observer:
            await status_over_http(observer)
            pool.jobs.counts_now = {"queued": 99}
            pool.jobs.fault = fault
            with caplog.at_level(logging.WARNING, logger="leakypool.metrics"):
                doc = await status_over_http(observer)
        assert doc["jobs"] == {"queued": 4, "failed": 1} and [j["id"] for j in doc["failed_jobs"]] == ["job-1"]
        assert "job counts unavailable" in caplog.text

    async def test_status_should_answer_with_the_last_figures_when_the_store_hangs(self, monkeypatch):
        """Test that a scrape waits at most STORE_READ_S for the store, then answers with what it had."""
        monkeypatch.setattr(_observer, "STORE_READ_S", 0.05)
        pool = Pool()
        async with Serving(pool) as observer:
            await status_over_http(observer)
            pool.jobs.hang = True
            pool.jobs.counts_now = {"queued": 99}
            doc = await status_over_http(observer)
        assert doc["jobs"] == {"queued": 4, "failed": 1}

    @pytest.mark.parametrize("fault", [StoreError("gone"), ConfigError("no pauses here")], ids=["store", "config"])
    async def test_status_should_keep_the_last_paused_queues_when_they_cannot_be_read(self, fault):
        """Test that paused queues last read stay shown while the store cannot say, and counts still refresh."""
        pool = Pool()
        async with Serving(pool) as observer:
            await status_over_http(observer)
            pool.jobs.paused_now = []
            pool.jobs.paused_fault = fault
            pool.jobs.counts_now = {"queued": 1, "failed": 1}
            doc = await status_over_http(observer)
        assert doc["paused"] == ["images"] and doc["jobs"] == {"queued": 1, "failed": 1}


class TestMetrics:
    async def test_metrics_should_expose_jobs_purged_and_paused_queues_when_the_pool_has_a_store(self):
        """Test that a scrape of /metrics refreshes from the store first, and exposes what it read."""
        async with Serving(Pool()) as observer:
            code, body = await get(observer, "/metrics")
        assert code == 200
        families = {f.name: f for f in text_string_to_metric_families(body.decode())}
        assert {s.labels["state"]: s.value for s in families["leakypool_jobs"].samples} == {"failed": 1, "queued": 4}
        assert families["leakypool_jobs_purged"].samples[0].value == 6
        assert [s.labels["queue"] for s in families["leakypool_queue_paused"].samples] == ["images"]

    async def test_metrics_should_have_no_job_figures_when_the_pool_has_no_store(self):
        """Test that a pool without a store exposes no job families (not zeros)."""
        async with Serving(Pool(store=False)) as observer:
            _, body = await get(observer, "/metrics")
        names = {f.name for f in text_string_to_metric_families(body.decode())}
        assert "leakypool_jobs" not in names and "leakypool_jobs_purged" not in names


class TestStart:
    async def test_start_should_raise_config_error_when_the_port_is_taken(self):
        """Test that a port in use is a ConfigError naming the setting and the address."""
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            observer = PoolObserver(Pool(), port)
            with pytest.raises(ConfigError, match=f"metrics_port: cannot bind 127.0.0.1:{port}"):
                await observer.start()

    async def test_start_should_require_the_token_when_one_is_given(self):
        """Test that the token and names reach the port: without the token nothing is served."""
        async with Serving(Pool(), token="t0ken") as observer:
            assert (await get(observer, "/status"))[0] == 401
            assert (await get(observer, "/status?token=t0ken"))[0] == 200
