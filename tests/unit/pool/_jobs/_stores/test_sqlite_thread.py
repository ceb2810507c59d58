"""Tests for pool._jobs._stores._sqlite_thread: group commit, one failing operation rolled back alone, errors named.

A real thread on a real SQLite file. To put several operations in one batch, a first operation holds
the thread (`Held`) while the others queue up behind it; the test's own connection reads what was committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sqlite3
import stat
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from pool._errors import ConfigError, StoreError
from pool._jobs._stores._sqlite_thread import BATCH_OPS, SINGLE, SQLiteThread

URL = "sqlite:///test/jobs.db"
WAIT_S = 10.0


@contextlib.asynccontextmanager
async def serving(path: pathlib.Path | str) -> AsyncIterator[SQLiteThread]:
    thread = SQLiteThread(str(path), URL, "NORMAL")
    try:
        yield thread
    finally:
        await asyncio.wait_for(thread.stop(), WAIT_S)


@contextlib.contextmanager
def reader(path: pathlib.Path) -> Iterator[sqlite3.Connection]:
    """The test's own connection to the file (usable from the store's thread too)."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        yield db
    finally:
        db.close()


async def run(thread: SQLiteThread, op: Any, write: bool | str = True) -> Any:
    return await asyncio.wait_for(thread.run(op, write=write), WAIT_S)


async def with_table(thread: SQLiteThread) -> None:
    await run(thread, lambda db: db.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)"))


def insert(x: int) -> Any:
    return lambda db: db.execute("INSERT INTO t VALUES (?)", (x,)).rowcount


def committed(db: sqlite3.Connection) -> list[int]:
    return [x for (x,) in db.execute("SELECT x FROM t ORDER BY x")]


class Held:
    """An operation that keeps the thread busy until `release`: what is queued meanwhile makes one batch."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, db: sqlite3.Connection) -> None:
        self.entered.set()
        assert self.released.wait(WAIT_S), "the test never released the thread"

    async def hold(self, thread: SQLiteThread) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(run(thread, self, write=False))
        assert await asyncio.to_thread(self.entered.wait, WAIT_S)
        return task

    def release(self) -> None:
        self.released.set()


async def queued(thread: SQLiteThread, *ops: tuple[Any, bool | str]) -> list[asyncio.Task[Any]]:
    """Start a `run` for each op; when this returns, each one is in the thread's queue, in this order."""
    tasks = [asyncio.ensure_future(thread.run(op, write=write)) for op, write in ops]
    await asyncio.sleep(0)  # one loop turn: each task runs to its put() (a run queues before its first await)
    return tasks


class TestSQLiteThread:
    async def test_run_should_return_the_ops_result_and_commit_a_write_before_it_returns(self, tmp_path):
        """Test that an operation's value comes back, and another connection sees its write at once."""
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            assert await run(thread, insert(7), SINGLE) == 1
            with reader(tmp_path / "jobs.db") as db:
                assert committed(db) == [7]
            assert await run(thread, lambda db: db.execute("SELECT count(*) FROM t").fetchone()[0], False) == 1

    async def test_run_should_commit_the_ops_queued_while_busy_in_one_transaction(self, tmp_path):
        """Test group commit: an operation queued behind another in the same batch does not see it committed."""
        held = Held()
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            with reader(tmp_path / "jobs.db") as db:
                busy = await held.hold(thread)
                seen: list[list[int]] = []
                tasks = await queued(thread, (insert(1), SINGLE), (lambda _: seen.append(committed(db)), False))
                held.release()
                await asyncio.wait_for(asyncio.gather(busy, *tasks), WAIT_S)
                assert seen == [[]]  # the insert ahead of it was not committed yet: one transaction
                assert committed(db) == [1]

    async def test_run_should_take_at_most_batch_ops_operations_in_one_transaction(self, tmp_path):
        """Test that a long queue is committed in transactions of BATCH_OPS operations (the rest in the next)."""
        held = Held()
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            with reader(tmp_path / "jobs.db") as db:

                def counted(x: int) -> Any:
                    def op(conn: sqlite3.Connection) -> int:
                        conn.execute("INSERT INTO t VALUES (?)", (x,))
                        return db.execute("SELECT count(*) FROM t").fetchone()[0]  # committed before this batch

                    return op

                busy = await held.hold(thread)
                tasks = await queued(thread, *((counted(x), SINGLE) for x in range(BATCH_OPS + 1)))
                held.release()
                seen = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
                await busy
                assert seen == [0] * BATCH_OPS + [BATCH_OPS]

    async def test_run_should_roll_back_only_the_failing_op_when_ops_share_a_batch(self, tmp_path):
        """Test that an operation of several statements that fails leaves nothing, its neighbours commit,
        and its caller gets its own exception (not a database error) as it raised it."""
        held = Held()
        failure = ValueError("the op's own fault")

        def half_then_fail(db: sqlite3.Connection) -> None:
            db.execute("INSERT INTO t VALUES (2)")
            raise failure

        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            busy = await held.hold(thread)
            tasks = await queued(thread, (insert(1), SINGLE), (half_then_fail, True), (insert(3), True))
            held.release()
            results = await asyncio.wait_for(asyncio.gather(busy, *tasks, return_exceptions=True), WAIT_S)
            assert results == [None, 1, failure, 1]
            with reader(tmp_path / "jobs.db") as db:
                assert committed(db) == [1, 3]

    async def test_run_should_raise_store_error_naming_the_store_when_a_statement_fails(self, tmp_path):
        """Test that a database error reaches the caller as a StoreError with the store's URL and the cause,
        and the other operations of its batch commit."""
        held = Held()
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            await run(thread, insert(1), SINGLE)
            busy = await held.hold(thread)
            tasks = await queued(thread, (insert(1), SINGLE), (insert(2), SINGLE))
            held.release()
            duplicate, second = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
            await busy
            assert isinstance(duplicate, StoreError)
            assert str(duplicate).startswith(f"store {URL}: IntegrityError: UNIQUE constraint failed")
            assert isinstance(duplicate.__cause__, sqlite3.IntegrityError)
            assert second == 1
            with reader(tmp_path / "jobs.db") as db:
                assert committed(db) == [1, 2]

    async def test_run_should_read_while_another_connection_holds_the_write_lock(self, tmp_path):
        """Test that a batch of reads begins a plain (deferred) transaction: a writer elsewhere does not hold it up."""
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            await run(thread, insert(1), SINGLE)
            with reader(tmp_path / "jobs.db") as other:
                other.execute("BEGIN IMMEDIATE")
                try:
                    count = await run(thread, lambda db: db.execute("SELECT count(*) FROM t").fetchone()[0], False)
                finally:
                    other.execute("ROLLBACK")
            assert count == 1

    async def test_run_should_not_disturb_the_batch_when_a_caller_gave_up_waiting(self, tmp_path):
        """Test that an operation whose caller was cancelled still runs, and the others in its batch get their
        results (settling a cancelled future must not stop the rest)."""
        held = Held()
        errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: errors.append(context))
        async with serving(tmp_path / "jobs.db") as thread:
            await with_table(thread)
            busy = await held.hold(thread)
            gone, after = await queued(thread, (insert(1), SINGLE), (insert(2), SINGLE))
            gone.cancel()
            held.release()
            assert await asyncio.wait_for(after, WAIT_S) == 1
            await busy
            with pytest.raises(asyncio.CancelledError):
                await gone
            with reader(tmp_path / "jobs.db") as db:
                assert committed(db) == [1, 2]
        assert errors == []

    async def test_stop_should_finish_what_is_queued_then_close_the_connection_and_end_the_thread(
        self, tmp_path, connections
    ):
        """Test that stop commits the operations queued before it, then leaves no connection or thread."""
        thread = SQLiteThread(str(tmp_path / "jobs.db"), URL, "NORMAL")
        await with_table(thread)
        (last,) = await queued(thread, (insert(5), SINGLE))
        await asyncio.wait_for(thread.stop(), WAIT_S)
        assert await asyncio.wait_for(last, WAIT_S) == 1
        assert not thread._thread.is_alive()
        assert len(connections) == 1 and connections.still_open() == []
        with reader(tmp_path / "jobs.db") as db:
            assert committed(db) == [5]

    async def test_the_file_should_be_created_private_with_its_write_ahead_log(self, tmp_path):
        """Test that a new store file, and the WAL SQLite makes beside it, are 0600 whatever the umask."""
        path = tmp_path / "jobs.db"
        saved = os.umask(0o022)
        try:
            async with serving(path) as thread:
                await with_table(thread)
                assert (await run(thread, lambda db: db.execute("PRAGMA journal_mode").fetchone()[0], False)) == "wal"
                modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        finally:
            os.umask(saved)
        assert modes["jobs.db"] == 0o600 and modes["jobs.db-wal"] == 0o600

    async def test_run_should_raise_config_error_when_the_file_is_not_a_database(self, tmp_path):
        """Test that a file of something else is named as such, for every operation, and the thread still stops."""
        path = tmp_path / "notes.txt"
        path.write_bytes(b"these are not the pages of a database\n" * 200)
        async with serving(path) as thread:
            for _ in range(2):
                with pytest.raises(ConfigError, match=f"store {URL}: not a SQLite database"):
                    await run(thread, lambda db: None, False)
        assert path.read_bytes().startswith(b"these are not")

    async def test_run_should_raise_store_error_when_the_file_cannot_be_opened(self, tmp_path):
        """Test that a path SQLite cannot open fails each operation with a StoreError naming the store."""
        async with serving(tmp_path / "missing" / "jobs.db") as thread:
            with pytest.raises(StoreError, match=f"store {URL}: OperationalError: unable to open") as caught:
                await run(thread, lambda db: None, SINGLE)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
