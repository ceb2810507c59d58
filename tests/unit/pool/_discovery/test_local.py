"""Tests for pool._discovery._local: worker records in a private directory, written, read, withdrawn, and cleaned."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import stat
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._discovery._local import (
    LocalDiscovery,
    LocalPublisher,
    _alive,
    record_from_json,
    record_to_json,
)
from pool._discovery._protocol import DiscoveryEvent, DiscoveryLike
from pool._errors import ConfigError
from pool._transport._rpc import WorkerMetadata

POLL_S = 0.01

records = st.builds(
    WorkerMetadata,
    uid=st.uuids(),
    address=st.text(max_size=30),
    pid=st.integers(0, 2**22),
    version=st.text(max_size=10),
    tags=st.frozensets(st.text(max_size=8), max_size=4),
    capacity=st.integers(0, 1000),
    tls=st.booleans(),
    local=st.booleans(),
)


def dead_pid() -> int:
    """A pid no process can have (pids stay below pid_max)."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read())


def me(n: int, **changes) -> WorkerMetadata:
    """A worker record of this (live) process."""
    fields = {"uid": uuid.UUID(int=n), "address": f"unix:/run/w{n}.sock", "pid": os.getpid(), "capacity": 2}
    return WorkerMetadata(**(fields | changes))


@pytest.fixture
def registry(tmp_path) -> str:
    path = tmp_path / "registry"
    path.mkdir(mode=0o700)
    return str(path)


async def next_event(events: AsyncIterator[DiscoveryEvent]) -> DiscoveryEvent:
    return await asyncio.wait_for(anext(events), 2)


class TestRecords:
    @given(records)
    def test_record_from_json_should_invert_record_to_json_when_given_any_worker(self, worker):
        """Test the round trip of every field a registry file stores (``local`` is the pool's own, never stored)."""
        assert record_from_json(record_to_json(worker)) == dataclasses.replace(worker, local=False)

    def test_record_to_json_should_store_plain_json_when_written(self):
        """Test the stored form: the uid as text, tags sorted, no ``local``."""
        worker = WorkerMetadata(uid=uuid.UUID(int=1), address="a:1", tags=frozenset({"b", "a"}), local=True)
        data = json.loads(record_to_json(worker))
        assert data["uid"] == str(uuid.UUID(int=1)) and data["tags"] == ["a", "b"] and "local" not in data

    def test_record_from_json_should_default_the_optional_fields_when_an_older_record_lacks_them(self):
        """Test that a record with only uid, address and pid reads with empty defaults."""
        worker = record_from_json(json.dumps({"uid": str(uuid.UUID(int=3)), "address": "a:1", "pid": 5}))
        assert worker == WorkerMetadata(uid=uuid.UUID(int=3), address="a:1", pid=5)

    @pytest.mark.parametrize(
        ("text", "error"),
        [
            ("{not json", ValueError),
            ('{"uid": "x", "address": "a", "pid": 1}', ValueError),
            ('{"address": "a", "pid": 1}', KeyError),
            ('{"uid": "00000000-0000-0000-0000-000000000001", "address": "a", "pid": null}', TypeError),
        ],
        ids=["not-json", "bad-uid", "no-uid", "null-pid"],
    )
    def test_record_from_json_should_raise_the_documented_errors_when_given_garbage(self, text, error):
        """Test that garbage raises only ValueError, KeyError or TypeError (what a reader skips)."""
        with pytest.raises(error):
            record_from_json(text)


class TestLocalPublisher:
    def test_init_should_write_the_record_in_a_private_directory_it_makes(self, tmp_path):
        """Test that a worker's entry is its uid's file, in a directory made 0700, with no temporary left."""
        directory = tmp_path / "new" / "registry"
        LocalPublisher(str(directory), me(1))
        assert os.listdir(directory) == [f"{uuid.UUID(int=1)}.json"]
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
        assert record_from_json((directory / f"{uuid.UUID(int=1)}.json").read_text()) == me(1)

    def test_withdraw_should_remove_the_record_once_and_then_do_nothing(self, registry):
        """Test that withdrawing twice (a drain, then exit) is harmless."""
        publisher = LocalPublisher(registry, me(1))
        publisher.withdraw()
        publisher.withdraw()
        assert os.listdir(registry) == []

    def test_init_should_raise_config_error_when_the_directory_is_open_to_others(self, registry):
        """Test that a worker will not register in a directory another user could plant records in."""
        os.chmod(registry, 0o777)  # noqa: S103 - opened up on purpose: the case under test
        with pytest.raises(ConfigError, match="open to other users"):
            LocalPublisher(registry, me(1))
        assert os.listdir(registry) == []


class TestLocalDiscovery:
    def test_local_discovery_should_be_a_discovery_backend_using_the_default_registry(self, monkeypatch, tmp_path):
        """Test that it satisfies the protocol and reads the registry workers use by default."""
        monkeypatch.setenv("LEAKYPOOL_LOCAL_REGISTRY", str(tmp_path / "shared"))
        discovery = LocalDiscovery()
        assert isinstance(discovery, DiscoveryLike) and discovery.directory == str(tmp_path / "shared")

    async def test_subscribe_should_report_registered_workers_then_updates_and_withdrawals(self, registry):
        """Test the life of entries: added when written, updated when rewritten, dropped when withdrawn."""
        LocalPublisher(registry, me(1))
        events = LocalDiscovery(registry, poll_interval=POLL_S).subscribe()
        try:
            event = await next_event(events)
            assert (event.kind, event.worker) == ("added", me(1))
            second = LocalPublisher(registry, me(2))
            event = await next_event(events)
            assert (event.kind, event.worker) == ("added", me(2))
            LocalPublisher(registry, me(1, capacity=7))
            event = await next_event(events)
            assert (event.kind, event.worker.capacity) == ("updated", 7)
            second.withdraw()
            event = await next_event(events)
            assert (event.kind, event.worker) == ("dropped", me(2))
        finally:
            await events.aclose()

    async def test_subscribe_should_ignore_and_remove_a_record_whose_process_is_gone(self, registry):
        """Test that a worker killed before it withdrew is not dialled, and its file is cleaned up."""
        LocalPublisher(registry, me(1, pid=dead_pid()))
        LocalPublisher(registry, me(2))
        events = LocalDiscovery(registry, poll_interval=POLL_S).subscribe()
        try:
            event = await next_event(events)
            assert event.worker.uid.int == 2
            assert os.listdir(registry) == [f"{uuid.UUID(int=2)}.json"]
        finally:
            await events.aclose()

    async def test_subscribe_should_skip_files_that_are_not_records(self, registry):
        """Test that other files, half-written temporaries and garbage are left alone and not reported."""
        for name, text in [("notes.txt", "hi"), ("x.json.tmp", "{"), ("junk.json", "{not json")]:
            with open(os.path.join(registry, name), "w") as f:
                f.write(text)
        LocalPublisher(registry, me(3))
        events = LocalDiscovery(registry, poll_interval=POLL_S).subscribe()
        try:
            assert (await next_event(events)).worker.uid.int == 3
            LocalPublisher(registry, me(4))
            assert (await next_event(events)).worker.uid.int == 4  # nothing came from the other files
        finally:
            await events.aclose()
        assert sorted(os.listdir(registry)) == sorted(
            ["notes.txt", "x.json.tmp", "junk.json", f"{uuid.UUID(int=3)}.json", f"{uuid.UUID(int=4)}.json"]
        )

    async def test_subscribe_should_wait_quietly_when_the_directory_does_not_exist_yet(self, tmp_path, caplog):
        """Test that a registry no worker has made yet is no error, and its workers show once it exists."""
        directory = str(tmp_path / "later")
        events = LocalDiscovery(directory, poll_interval=POLL_S).subscribe()
        try:
            with caplog.at_level(logging.ERROR, logger="leakypool.discovery"):
                waiting = asyncio.ensure_future(next_event(events))
                await asyncio.sleep(POLL_S * 5)  # a few polls of the missing directory
                assert not waiting.done()
                LocalPublisher(directory, me(1))
                assert (await waiting).worker.uid.int == 1
            assert caplog.text == ""
        finally:
            await events.aclose()

    async def test_subscribe_should_read_nothing_and_log_once_when_the_directory_is_not_private(self, registry, caplog):
        """Test that records in a directory others may write are not believed, and the reason is logged once."""
        LocalPublisher(registry, me(1))
        os.chmod(registry, 0o755)  # noqa: S103 - opened up on purpose: the case under test
        discovery = LocalDiscovery(registry, poll_interval=POLL_S)
        events = discovery.subscribe()
        try:
            with caplog.at_level(logging.ERROR, logger="leakypool.discovery"):
                waiting = asyncio.ensure_future(next_event(events))
                await asyncio.sleep(POLL_S * 5)
                assert not waiting.done()
                os.chmod(registry, 0o700)
                assert (await waiting).worker.uid.int == 1
            assert caplog.text.count("open to other users") == 1
        finally:
            await events.aclose()


class TestAlive:
    def test_alive_should_be_true_for_live_processes_and_false_for_a_pid_no_process_has(self):
        """Test the liveness check, including a process this user may not signal (pid 1)."""
        assert _alive(os.getpid()) and _alive(1)
        assert not _alive(dead_pid())
