"""Tests for the SQLite registry table: a locked file never stalls the event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import sqlite3
import subprocess
import sys

import pytest

from pool._base._tasks import TaskOwner
from pool._discovery._registry import connect
from pool._errors import StoreError
from tests.sealing import SEAL

ROOT = pathlib.Path(__file__).resolve().parents[4]


async def test_a_write_to_a_locked_sqlite_registry_should_wait_off_the_event_loop(tmp_path):
    """Another process holds the write lock; only the event loop can release it here.

    A statement run on the loop would wait there SQLITE_BUSY_S and fail ("database is locked")
    before the loop could release the lock; run on the registry's thread, it waits and succeeds.
    """
    path = tmp_path / "registry.db"
    registry = await connect(f"sqlite:///{path}")
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        writes = asyncio.gather(registry.put("w1", "{}", 60.0), registry.live())
        for _ in range(3):
            await asyncio.sleep(0)  # the writes start: on the loop, they would block it right here
        holder.execute("COMMIT")
        _, live = await asyncio.wait_for(writes, 30)
        assert live.records == {"w1": "{}"}
    finally:
        holder.close()
        await registry.close()


async def test_watch_should_report_a_commit_by_another_connection(tmp_path):
    path = tmp_path / "registry.db"
    registry = await connect(f"sqlite:///{path}")
    changed = asyncio.Event()
    await registry.listen(changed.set)
    watcher = asyncio.ensure_future(registry.watch())
    try:
        with contextlib.closing(sqlite3.connect(path)) as other, other:  # (`with connect()` commits, never closes)
            other.execute("INSERT INTO leakypool_workers VALUES ('w2', '{}', 1e12)")
        await asyncio.wait_for(changed.wait(), 30)
        assert (await registry.live()).records == {"w2": "{}"}
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await registry.close()


def test_a_worker_without_registry_should_not_import_sqlite():
    """Test that only ``--registry`` loads the registry module and sqlite3 into a worker."""
    check = "import sys, pool._worker._main; sys.exit(bool({'sqlite3', 'pool._worker._registry'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT, timeout=120, check=False).returncode == 0


async def test_a_second_withdraw_should_return_only_once_the_record_is_removed(tmp_path):
    """The worker's exit calls withdraw() while the one its drain started runs: it must wait for it."""
    import logging
    import uuid

    from pool._base._tasks import TaskOwner
    from pool._transport._rpc import WorkerMetadata
    from pool._worker._registry import RegistryRecord

    path = tmp_path / "registry.db"
    worker = WorkerMetadata(
        uid=uuid.uuid4(), address="127.0.0.1:1", pid=1, version="0", tags=frozenset(), capacity=1, tls=False
    )
    record = RegistryRecord(f"sqlite:///{path}", worker, ttl=60.0, seal=SEAL)
    tasks = TaskOwner("test", logging.getLogger("test"))
    await record.start(tasks)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the first removal waits for this lock
        first = tasks.spawn(record.withdraw(), name="withdraw on drain")
        await asyncio.sleep(0)
        second = asyncio.ensure_future(record.withdraw())
        for _ in range(3):
            await asyncio.sleep(0)
        assert not second.done()  # it waits for the first one...
        holder.execute("COMMIT")
        await asyncio.wait_for(second, 30)
        # ...which removed the row by the time the second returned
        with contextlib.closing(sqlite3.connect(path)) as db:
            assert db.execute("SELECT count(*) FROM leakypool_workers").fetchone()[0] == 0
        await first
    finally:
        holder.close()
        await tasks.aclose()


@pytest.mark.filterwarnings("error::ResourceWarning")
class TestConnectionsClosed:
    """Every connection a registry opens is closed by `close`, and on every way opening it can fail (the
    `connections` fixture records them; Python 3.13 warns on one the garbage collector finds open)."""

    @pytest.mark.parametrize("kind", ["sqlite", "postgres"])
    async def test_close_should_close_the_connection(self, kind, tmp_path, request, connections):
        url = f"sqlite:///{tmp_path / 'registry.db'}" if kind == "sqlite" else request.getfixturevalue("postgres_url")
        registry = await connect(url)
        await registry.put("w1", "{}", 60.0)
        assert (await registry.live()).records == {"w1": "{}"}
        await registry.close()
        assert connections.closed_and_collected() == 1

    async def test_a_cancelled_close_should_close_the_connection_all_the_same(self, tmp_path, connections):
        """Test a close cancelled while it waits behind a statement (held up by another process's lock)."""
        path = tmp_path / "registry.db"
        registry = await connect(f"sqlite:///{path}")
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as holder:
            holder.execute("BEGIN IMMEDIATE")
            writing = asyncio.ensure_future(registry.put("w1", "{}", 60.0))
            await asyncio.sleep(0.05)  # the write waits for the lock on the registry's thread
            closing = asyncio.ensure_future(registry.close())
            await asyncio.sleep(0)
            closing.cancel()
            await asyncio.gather(closing, return_exceptions=True)
            holder.execute("COMMIT")
            await asyncio.wait_for(writing, 30)
        for _ in range(500):  # the close runs on the registry's thread once the write is done
            if not connections.still_open():
                break
            await asyncio.sleep(0.01)
        assert connections.closed_and_collected() == 2

    async def test_a_refused_sqlite_open_should_close_its_connection(self, tmp_path, connections):
        (tmp_path / "text").write_text("not a database\n" * 200)
        with pytest.raises(StoreError, match="not a database"):
            await connect(f"sqlite:///{tmp_path / 'text'}")
        assert connections.closed_and_collected() == 1

    async def test_a_refused_postgres_open_should_close_its_connection(
        self, postgres_server, postgres_url, connections
    ):
        """Test a database whose schema the user may not create tables in (refused after connecting)."""
        postgres_server.psql(f"ALTER DATABASE {postgres_url.rsplit('/', 1)[1]} OWNER TO postgres")
        with pytest.raises(StoreError, match="permission denied"):
            await connect(postgres_url)
        assert connections.closed_and_collected() == 1

    async def test_a_worker_record_that_cannot_be_written_should_close_its_connection(self, tmp_path, connections):
        """Test a registry that opens but refuses the row (another application's table of that name)."""
        import uuid

        from pool._transport._rpc import WorkerMetadata
        from pool._worker._registry import RegistryRecord

        path = tmp_path / "registry.db"
        with contextlib.closing(sqlite3.connect(path)) as db, db:
            db.execute("CREATE TABLE leakypool_workers (uid TEXT)")
        worker = WorkerMetadata(
            uid=uuid.uuid4(), address="127.0.0.1:1", pid=1, version="0", tags=frozenset(), capacity=1, tls=False
        )
        tasks = TaskOwner("test", logging.getLogger("test"))
        try:
            with pytest.raises(StoreError, match="record"):
                await RegistryRecord(f"sqlite:///{path}", worker, ttl=60.0, seal=SEAL).start(tasks)
        finally:
            await tasks.aclose()
        assert connections.closed_and_collected() == 2
