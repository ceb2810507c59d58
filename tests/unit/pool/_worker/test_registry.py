"""Tests for pool._worker._registry: a worker's row written at start, kept fresh, written back, removed on drain.

A real SQLite registry in a temporary folder, read behind the record's back with a connection of the test's own;
for a registry out of reach, a PostgreSQL URL at a port on 127.0.0.1 where nothing listens (refused at once).
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator

import pytest

from pool._base._tasks import TaskOwner
from pool._config._settings import WorkerConfig
from pool._discovery._local import record_from_json
from pool._discovery._registry import open_record
from pool._errors import ConfigError, StoreError
from pool._transport._rpc import WorkerMetadata
from pool._worker._registry import REFRESHES_PER_TTL, RegistryRecord, start_registry
from pool._worker._service import WorkerService
from tests.integration.support.helpers import eventually
from tests.sealing import SEAL, SECRET

WAIT_S = 5.0
TTL_S = 0.3
"""Short enough that a test sees refreshes (one every TTL_S / REFRESHES_PER_TTL)."""
UID = uuid.UUID(int=42)
WORKER = WorkerMetadata(uid=UID, address="127.0.0.1:7000", pid=1234, version="9.9", tags=frozenset({"gpu"}), capacity=3)


def rows(path: str) -> dict[str, tuple[str, float]]:
    """The registry table as it is on disk: uid -> (record, expires_at); none while the table is missing."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        try:
            found = db.execute("SELECT * FROM leakypool_workers").fetchall()
        except sqlite3.OperationalError as exc:
            assert "no such table" in str(exc)
            return {}
        return {uid: (record, expires) for uid, record, expires in found}


def change(path: str, statement: str) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(statement)


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "registry.db")


@pytest.fixture
def unreachable() -> Iterator[str]:
    """A PostgreSQL URL at a loopback port bound by this test and not listening: every connection is refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield f"postgresql://nobody:secret@127.0.0.1:{held.getsockname()[1]}/db"


class TestRegistryRecord:
    async def test_start_should_write_the_row_with_its_ttl_when_the_registry_answers(self, path):
        """Test that a started worker is in the registry at once, as its record, living TTL past the write."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(f"sqlite:///{path}", WORKER, ttl=60.0, seal=SEAL)
        try:
            await record.start(tasks)
            ((uid, (text, expires)),) = rows(path).items()
            assert uid == str(UID)
            assert record_from_json(open_record(SEAL, str(UID), text)) == WORKER
            assert 50.0 < expires - time.time() <= 60.0
        finally:
            await record.withdraw()
            await tasks.aclose()
        assert rows(path) == {}

    async def test_refresh_should_write_the_row_back_when_it_disappeared(self, path):
        """Test that the row is rewritten every TTL / REFRESHES_PER_TTL: one removed behind its back returns."""
        assert REFRESHES_PER_TTL >= 2
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(f"sqlite:///{path}", WORKER, ttl=TTL_S, seal=SEAL)
        try:
            await record.start(tasks)
            change(path, "DELETE FROM leakypool_workers")
            await eventually(lambda: str(UID) in rows(path), timeout=WAIT_S)
        finally:
            await record.withdraw()
            await tasks.aclose()

    async def test_refresh_should_reconnect_and_write_the_row_back_when_a_write_failed(self, path, caplog):
        """Test that a failed refresh (the table gone) is logged, the connection dropped, and a new one rewrites it."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(f"sqlite:///{path}", WORKER, ttl=TTL_S, seal=SEAL)
        try:
            await record.start(tasks)
            change(path, "DROP TABLE leakypool_workers")
            await eventually(lambda: "could not refresh this worker's record" in caplog.text, timeout=WAIT_S)
            await eventually(
                lambda: str(UID) in rows(path), timeout=WAIT_S
            )  # a new connection made the table again, and wrote it
        finally:
            await record.withdraw()
            await tasks.aclose()
        assert rows(path) == {}

    async def test_withdraw_should_remove_the_row_and_stop_refreshing_when_the_worker_drains(self, path):
        """Test that a drained worker's row goes at once and is never written back (pools stop sending it work)."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(f"sqlite:///{path}", WORKER, ttl=TTL_S, seal=SEAL)
        try:
            await record.start(tasks)
            await record.withdraw()
            assert rows(path) == {}
            await asyncio.sleep(TTL_S)  # three refresh periods: none may write it back
            assert rows(path) == {}
        finally:
            await tasks.aclose()

    async def test_withdraw_should_return_once_the_first_removal_is_done_when_called_again(self, path):
        """Test that a second withdraw (the worker's exit) waits for the one its drain started."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(f"sqlite:///{path}", WORKER, ttl=60.0, seal=SEAL)
        try:
            await record.start(tasks)
            first = asyncio.ensure_future(record.withdraw())
            await asyncio.sleep(0)  # the first one is under way
            await asyncio.wait_for(record.withdraw(), WAIT_S)
            assert first.done()
            assert rows(path) == {}
        finally:
            await tasks.aclose()

    async def test_withdraw_should_log_and_return_when_the_registry_cannot_be_reached(self, unreachable, caplog):
        """Test that a removal that fails is not an error: logged (without the password), the row expires."""
        record = RegistryRecord(unreachable, WORKER, ttl=60.0, seal=SEAL)
        await asyncio.wait_for(record.withdraw(), WAIT_S)
        assert "it expires by itself" in caplog.text
        assert "secret" not in caplog.text

    async def test_start_should_try_again_until_retry_ends_when_the_registry_is_out_of_reach(self, unreachable, caplog):
        """Test that a registry out of reach at start is waited for ``retry`` s, a log line per try, then raises."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(unreachable, WORKER, ttl=60.0, retry=0.4, seal=SEAL)
        began = time.monotonic()
        with pytest.raises(StoreError):
            await asyncio.wait_for(record.start(tasks), WAIT_S * 2)
        assert time.monotonic() - began >= 0.4
        tries = [r.getMessage() for r in caplog.records if "--store-retry" in r.getMessage()]
        assert len(tries) >= 2 and "try 1," in tries[0] and "try 2," in tries[1]
        assert len(tasks) == 0  # nothing refreshes a row never written
        await tasks.aclose()

    async def test_start_should_raise_at_once_when_the_registry_refuses(self, tmp_path, caplog):
        """Test that a refusal (here a file that cannot be made) is not waited out, whatever ``retry``."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        record = RegistryRecord(
            f"sqlite:///{tmp_path}/missing/folder/registry.db", WORKER, ttl=60.0, retry=60.0, seal=SEAL
        )
        with pytest.raises(StoreError):
            await asyncio.wait_for(record.start(tasks), WAIT_S)
        assert "--store-retry" not in caplog.text
        await tasks.aclose()

    async def test_start_should_raise_config_error_when_the_url_is_not_a_registry(self):
        """Test that a URL of no registry kind is a configuration error, not a store outage."""
        tasks = TaskOwner("test worker", logging.getLogger("test"))
        with pytest.raises(ConfigError):
            await RegistryRecord("redis://localhost/0", WORKER, ttl=60.0, retry=60.0, seal=SEAL).start(tasks)
        await tasks.aclose()


INFO = {"uid": str(UID), "port": 7001, "pid": 4321, "version": "1.2.3", "capacity": 2}
"""What a started worker knows of itself (`_main`)."""


class TestStartRegistry:
    async def test_start_registry_should_do_nothing_when_no_registry_is_set(self):
        """Test that a worker without --registry records nothing."""
        service = WorkerService(uid=str(UID), backpressure=None)
        assert await start_registry(WorkerConfig(), service, INFO) is None
        await service.aclose()

    async def test_start_registry_should_record_the_advertised_address_and_withdraw_it_when_draining(self, path):
        """Test the row a --registry worker writes (its --advertise address, tags, capacity) and its removal on drain."""
        service = WorkerService(uid=str(UID), backpressure=None)
        config = WorkerConfig(
            host="0.0.0.0", advertise="::1", tags=("a", "b"), registry=f"sqlite:///{path}", secret=SECRET
        )
        record = None
        try:
            record = await start_registry(config, service, INFO)
            assert record is not None
            (text, _) = rows(path)[str(UID)]
            written = record_from_json(open_record(SEAL, str(UID), text))
            assert (written.address, written.pid, written.version, written.capacity) == ("[::1]:7001", 4321, "1.2.3", 2)
            assert written.tags == frozenset({"a", "b"})
            await asyncio.wait_for(service.drain("test", 0.0), WAIT_S)
            await asyncio.wait_for(record.withdraw(), WAIT_S)  # returns once the drain's removal is done
            assert rows(path) == {}
        finally:
            if record is not None:
                await record.withdraw()  # (done already, unless the test failed before: its connection closes)
            await service.aclose()

    async def test_start_registry_should_raise_config_error_when_the_registry_cannot_record_it(self, tmp_path):
        """Test that a registry that refuses makes the worker exit as misconfigured (status 2), naming --registry."""
        service = WorkerService(uid=str(UID), backpressure=None)
        config = WorkerConfig(registry=f"sqlite:///{tmp_path}/missing/registry.db", store_retry=0.0)
        try:
            with pytest.raises(ConfigError, match="--registry: cannot record this worker"):
                await start_registry(config, service, INFO)
        finally:
            await service.aclose()
