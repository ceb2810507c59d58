"""Tests for the SQLite registry table: a locked file never stalls the event loop."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import subprocess
import sys

from pool._discovery._registry import connect

ROOT = pathlib.Path(__file__).resolve().parents[3]


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
        assert live == {"w1": "{}"}
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
        with sqlite3.connect(path) as other:
            other.execute("INSERT INTO leakypool_workers VALUES ('w2', '{}', 1e12)")
        await asyncio.wait_for(changed.wait(), 30)
        assert await registry.live() == {"w2": "{}"}
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        await registry.close()


def test_a_worker_without_registry_should_not_import_sqlite():
    """Test that only ``--registry`` loads the registry module and sqlite3 into a worker."""
    check = "import sys, pool._worker._main; sys.exit('sqlite3' in sys.modules or 'pool._worker._registry' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT, timeout=120).returncode == 0
