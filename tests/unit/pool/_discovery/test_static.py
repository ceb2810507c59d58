"""Tests for pool._discovery._static: workers at fixed addresses, and the in-memory double the other tests drive."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._discovery._protocol import DiscoveryEvent, DiscoveryLike
from pool._discovery._static import StaticDiscovery, probe
from pool._errors import ConfigError
from pool._transport._rpc import WorkerMetadata
from pool._transport._trust import Trust


def worker(n: int, capacity: int = 1) -> WorkerMetadata:
    return WorkerMetadata(uid=uuid.UUID(int=n), address=f"10.0.0.{n}:7000", capacity=capacity)


async def next_event(events: AsyncIterator[DiscoveryEvent]) -> DiscoveryEvent:
    return await asyncio.wait_for(anext(events), 1)


class TestStaticDiscovery:
    def test_static_discovery_should_be_a_discovery_backend(self):
        """Test that it satisfies the protocol pools accept."""
        assert isinstance(StaticDiscovery(), DiscoveryLike)

    async def test_subscribe_should_announce_the_known_workers_then_each_change(self):
        """Test the order: the workers given, as added; then added, updated and dropped as they happen."""
        discovery = StaticDiscovery(workers=[worker(1), worker(2)])
        events = discovery.subscribe()
        try:
            first = [await next_event(events), await next_event(events)]
            assert [(e.kind, e.worker.uid.int) for e in first] == [("added", 1), ("added", 2)]
            discovery.add(worker(3))
            discovery.add(worker(1, capacity=5))
            discovery.drop(uuid.UUID(int=2))
            discovery.drop(uuid.UUID(int=99))  # unknown: no event
            discovery.add(worker(4))
            seen = [await next_event(events) for _ in range(4)]
            assert [(e.kind, e.worker.uid.int) for e in seen] == [
                ("added", 3),
                ("updated", 1),
                ("dropped", 2),
                ("added", 4),
            ]
            assert seen[1].worker.capacity == 5
        finally:
            await events.aclose()

    async def test_subscribe_should_show_a_later_subscriber_the_workers_as_they_are_now(self):
        """Test that a new subscription starts from the current set (changes folded in), each as added."""
        discovery = StaticDiscovery(workers=[worker(1)])
        discovery.add(worker(2))
        discovery.add(worker(1, capacity=9))
        discovery.drop(uuid.UUID(int=2))
        events = discovery.subscribe()
        try:
            event = await next_event(events)
            assert (event.kind, event.worker) == ("added", worker(1, capacity=9))
            discovery.add(worker(5))
            assert (await next_event(events)).worker.uid.int == 5  # nothing else was pending
        finally:
            await events.aclose()

    async def test_subscribe_should_feed_every_subscription_and_stop_feeding_a_closed_one(self):
        """Test that changes reach each running subscription, and a closed one is let go."""
        discovery = StaticDiscovery()
        one, two = discovery.subscribe(), discovery.subscribe()
        waiting = [asyncio.ensure_future(anext(s)) for s in (one, two)]
        await asyncio.sleep(0)  # both are subscribed and waiting
        discovery.add(worker(1))
        got = await asyncio.wait_for(asyncio.gather(*waiting), 1)
        assert [e.worker.uid.int for e in got] == [1, 1]
        await one.aclose()
        assert len(discovery._subscribers) == 1
        discovery.add(worker(2))
        assert (await next_event(two)).worker.uid.int == 2
        await two.aclose()
        assert discovery._subscribers == []

    @given(st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 3)), max_size=30))
    def test_subscribe_events_should_replay_into_the_current_set_when_changes_come_in_any_order(self, ops):
        """Test that added/updated/dropped, applied in order, rebuild exactly the double's set of workers."""
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._replay(ops))
        finally:
            loop.close()

    @staticmethod
    async def _replay(ops: list[tuple[bool, int, int]]) -> None:
        discovery = StaticDiscovery()
        events = discovery.subscribe()
        pending = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0)
        expected: dict[uuid.UUID, WorkerMetadata] = {}
        published = 0
        for add, n, capacity in ops:
            if add:
                discovery.add(worker(n, capacity))
                expected[uuid.UUID(int=n)] = worker(n, capacity)
                published += 1
            elif expected.pop(uuid.UUID(int=n), None) is not None:
                discovery.drop(uuid.UUID(int=n))
                published += 1
            else:
                discovery.drop(uuid.UUID(int=n))
        seen: dict[uuid.UUID, WorkerMetadata] = {}
        try:
            for i in range(published):
                event = await asyncio.wait_for(pending if i == 0 else anext(events), 1)
                uid = event.worker.uid
                if event.kind == "dropped":
                    assert uid in seen
                    del seen[uid]
                else:
                    assert (event.kind == "added") == (uid not in seen)
                    seen[uid] = event.worker
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
            await events.aclose()
        assert seen == expected


class TestProbe:
    async def test_probe_should_return_none_and_log_when_no_worker_answers(self, tmp_path, caplog):
        """Test that an address with no worker behind it is skipped with a warning naming it."""
        address = f"unix:{tmp_path / 'nobody.sock'}"
        with caplog.at_level(logging.WARNING, logger="leakypool.discovery"):
            assert await asyncio.wait_for(probe(address, 2.0, Trust.of("s")), 5) is None
        assert f"no worker answered at {address}" in caplog.text

    async def test_subscribe_should_skip_an_address_that_does_not_answer_and_announce_the_rest(self, tmp_path):
        """Test that a dead address does not hold up the workers known in memory."""
        discovery = StaticDiscovery([f"unix:{tmp_path / 'nobody.sock'}"], workers=[worker(1)], secret="s", timeout=2)
        events = discovery.subscribe()
        try:
            event = await asyncio.wait_for(anext(events), 5)
            assert (event.kind, event.worker.uid.int) == ("added", 1)
        finally:
            await events.aclose()

    def test_init_should_read_the_secret_file_only_when_there_are_addresses_to_probe(self, tmp_path):
        """Test that an in-memory double reads no secret, and a prober fails at once on a bad secret file."""
        missing = str(tmp_path / "missing")
        StaticDiscovery(workers=[worker(1)], secret_file=missing)
        with pytest.raises(ConfigError, match="secret_file"):
            StaticDiscovery(["127.0.0.1:1"], secret_file=missing)
