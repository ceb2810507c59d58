"""Tests for pool._call._connection: one shared stream per worker, re-opened after it fails, retired when idle.

The worker is the fake of ``tests/unit/pool/_transport/test_unix_channel.py``
on a real unix socket: the connection's own decisions (which channel, when a
stream opens again, what the pool hears of a stream's end) are under test,
not a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import pool
from pool._call._calls import judge_first
from pool._call._connection import WorkerConnection, open_channel
from pool._call._task import CallRecord
from pool._transport import _side
from pool._transport._grpc_channel import GrpcChannel
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import WorkerMetadata
from pool._transport._unix_channel import SIDE_OK, UnixChannel
from tests.unit.pool._transport.fake_worker import WORKER, FakeWorker, framed, read_message, trust

WAIT_S = 30.0
"""Bound on every wait in these tests (each step takes milliseconds; this is for a loaded machine)."""


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A unix socket path short enough for AF_UNIX (tmp_path's can be over 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="lp-cn-") as folder:
        yield os.path.join(folder, "w.sock")


@pytest.fixture(autouse=True)
def side_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A unix channel says large values go out of band (`_side.expect`): put the process-wide flag back after."""
    monkeypatch.setattr(_side, "_expected", _side._expected)


class Rooms:
    """An ``on_room`` callback that records what it was told and wakes a test."""

    def __init__(self) -> None:
        self.told: list[tuple[uuid.UUID, pb.Room | None]] = []
        self.changed = asyncio.Event()

    def __call__(self, uid: uuid.UUID, room: pb.Room | None) -> None:
        self.told.append((uid, room))
        self.changed.set()

    async def next(self) -> tuple[uuid.UUID, pb.Room | None]:
        await asyncio.wait_for(self.changed.wait(), WAIT_S)
        self.changed.clear()
        return self.told[-1]


def task(name: str = "routine") -> CallRecord:
    return CallRecord(name, False, b"digest", b"blob", b"")


class Dispatching:
    """A worker's Dispatch stream, driven by the test: what the pool sent, and frames to answer with."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[pb.Frames] = asyncio.Queue()
        self.replies: asyncio.Queue[pb.Frames | None] = asyncio.Queue()  # None: hang up

    async def serve(self, method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if method == "Buffers":
            writer.write(framed(SIDE_OK))
            await reader.read()
            return
        if method != "Dispatch":
            return

        async def read() -> None:
            while True:
                self.received.put_nowait(pb.Frames.FromString(await read_message(reader)))

        reading = asyncio.ensure_future(read())
        try:
            while (reply := await self.replies.get()) is not None:
                writer.write(framed(reply.SerializeToString()))
        finally:
            reading.cancel()

    async def call_ids(self, count: int = 1) -> list[int]:
        """The ids of the next ``count`` calls the pool sent (in one batch or several)."""
        ids: list[int] = []
        while len(ids) < count:
            batch = await asyncio.wait_for(self.received.get(), WAIT_S)
            ids += [frame.id for frame in batch.frames if frame.HasField("call")]
        return ids


def frames(*build: tuple[int, str]) -> pb.Frames:
    message = pb.Frames()
    for call_id, body in build:
        frame = message.frames.add(id=call_id)
        if body == "room":
            frame.room.in_flight, frame.room.capacity = 1, 2
        elif body == "accept":
            frame.accept.SetInParent()
        elif body == "reject":
            frame.reject.code, frame.reject.message = 8, "busy"  # RESOURCE_EXHAUSTED
        elif body == "return":
            frame.outcome.kind = pb.Outcome.RETURN
    return message


async def connection(address: str, rooms: Rooms | None = None) -> WorkerConnection:
    return WorkerConnection(WorkerMetadata(WORKER, address), None, trust(), on_room=rooms)


@contextlib.asynccontextmanager
async def opened(address: str, rooms: Rooms | None = None) -> AsyncIterator[WorkerConnection]:
    """A `WorkerConnection` to ``address``, closed at the end."""
    conn = await connection(address, rooms)
    try:
        yield conn
    finally:
        await conn.close()


class TestOpenChannel:
    async def test_open_channel_should_pick_a_unix_channel_for_a_unix_address(self):
        unix = open_channel("unix:/run/w.sock", trust(), WORKER)
        try:
            assert isinstance(unix, UnixChannel) and unix.uid == WORKER
            assert "/run/w.sock" in repr(unix) and "unix:" not in repr(unix)
        finally:
            await unix.close()

    async def test_open_channel_should_pick_grpc_for_a_host_and_port(self):
        grpc_channel = open_channel("127.0.0.1:1", trust(), None)
        try:
            assert isinstance(grpc_channel, GrpcChannel) and grpc_channel.uid is None
        finally:
            await grpc_channel.close()


class TestWorkerConnection:
    async def test_a_new_connection_should_have_nothing_in_flight_and_not_be_broken(self, socket_path):
        async with opened(f"unix:{socket_path}") as conn:
            assert conn.in_flight == 0 and not conn.broken and not conn.closed
            assert repr(conn) == f"<WorkerConnection worker {WORKER} at unix:{socket_path} in_flight=0>"

    async def test_state_and_stop_should_reach_the_worker(self, socket_path):
        async with FakeWorker(socket_path) as worker, opened(f"unix:{socket_path}") as conn:
            assert (await conn.state(WAIT_S)).uid == str(WORKER)
            await conn.stop(3.0, WAIT_S)
        assert worker.proven == ["State", "Stop"]
        assert pb.StopRequest.FromString(worker.requests[1]).grace == 3.0

    async def test_open_should_share_one_stream_and_pass_room_frames_on(self, socket_path):
        """Test that calls go out on one Dispatch stream, replies reach them, and a Room frame reaches
        ``on_room`` and ``last_room``."""
        # Arrange
        stream = Dispatching()
        rooms = Rooms()
        async with FakeWorker(socket_path, stream.serve) as worker, opened(f"unix:{socket_path}", rooms) as conn:
            # Act
            first, second = conn.open(task("a")), conn.open(task("b"))
            assert conn.in_flight == 2
            assert await stream.call_ids(2) == [first.id, second.id]
            stream.replies.put_nowait(frames((0, "room"), (first.id, "return"), (second.id, "return")))
            # Assert
            assert (await asyncio.wait_for(first.receive(), WAIT_S)).outcome.kind == pb.Outcome.RETURN
            assert (await asyncio.wait_for(second.receive(), WAIT_S)).outcome.kind == pb.Outcome.RETURN
            uid, room = await rooms.next()
            assert uid == WORKER and room is not None and room.capacity == 2
            assert conn.last_room == room
            assert conn.in_flight == 0
            assert worker.proven.count("Dispatch") == 1
            stream.replies.put_nowait(None)

    async def test_a_reject_should_be_judged_worker_rejected_when_the_worker_declines(self, socket_path):
        """Test that a Reject is the worker's "not now": the pool keeps it and tries another."""
        stream = Dispatching()
        async with FakeWorker(socket_path, stream.serve), opened(f"unix:{socket_path}") as conn:
            call = conn.open(task())

            async def dispatch() -> None:
                judge_first(call, await call.next_item(), "f")

            dispatching = asyncio.ensure_future(dispatch())
            try:
                (call_id,) = await stream.call_ids()
                stream.replies.put_nowait(frames((call_id, "reject")))
                with pytest.raises(pool.WorkerRejected, match="busy"):
                    await asyncio.wait_for(dispatching, WAIT_S)
            finally:
                dispatching.cancel()
                stream.replies.put_nowait(None)
            assert not conn.broken

    async def test_a_failed_stream_should_tell_on_room_and_reopen_on_the_next_call(self, socket_path):
        """Test that an unreachable worker breaks the stream (on_room hears None), and the next call opens
        a new one, which works once the worker is there."""
        rooms = Rooms()
        async with opened(f"unix:{socket_path}", rooms) as conn:
            conn.connect()
            assert await rooms.next() == (WORKER, None)
            assert conn.broken and conn.in_flight == 0
            async with FakeWorker(socket_path) as worker:
                conn.connect()  # a new stream
                assert not conn.broken
                await asyncio.wait_for(worker.arrived.wait(), WAIT_S)
                assert "Dispatch" in worker.proven
                conn.connect()  # the live one: no new stream
                assert worker.proven.count("Dispatch") == 1

    async def test_a_worker_failing_the_handshake_should_be_logged_and_break_the_stream(self, socket_path, caplog):
        """Test that a worker without the pool's secret is logged as an error and its calls get `WorkerBroken`
        with the UNAUTHENTICATED code (the pool evicts it)."""
        rooms = Rooms()
        async with FakeWorker(socket_path, keys=("another",)), opened(f"unix:{socket_path}", rooms) as conn:
            with caplog.at_level(logging.ERROR, logger="leakypool.pool"):
                call = conn.open(task())
                await rooms.next()
            with pytest.raises(pool.WorkerBroken) as broken:
                await asyncio.wait_for(call.receive(), WAIT_S)
            assert broken.value.code == "UNAUTHENTICATED"
            assert f"lost worker {WORKER} at unix:{socket_path}: UNAUTHENTICATED:" in str(broken.value)
            assert conn.broken
        assert any("failed the handshake" in r.getMessage() for r in caplog.records)

    async def test_retire_should_hand_the_connection_over_only_once_its_calls_ended(self, socket_path):
        """Test that a retired worker's last calls still deliver, and ``on_idle`` runs once, after them."""
        stream = Dispatching()
        idle: list[WorkerConnection] = []
        handed = asyncio.Event()
        async with FakeWorker(socket_path, stream.serve), opened(f"unix:{socket_path}") as conn:
            call = conn.open(task())
            (call_id,) = await stream.call_ids()
            conn.retire(lambda c: (idle.append(c), handed.set()))
            assert idle == []
            stream.replies.put_nowait(frames((call_id, "return")))
            assert (await asyncio.wait_for(call.receive(), WAIT_S)).outcome.kind == pb.Outcome.RETURN
            await asyncio.wait_for(handed.wait(), WAIT_S)
            assert idle == [conn]
            stream.replies.put_nowait(None)

    async def test_retire_should_hand_the_connection_over_once_its_stream_failed_under_its_calls(self, socket_path):
        """Test that a retired worker that goes away with calls in flight is handed over as they fail."""
        stream = Dispatching()
        idle: list[WorkerConnection] = []
        handed = asyncio.Event()
        async with FakeWorker(socket_path, stream.serve), opened(f"unix:{socket_path}") as conn:
            call = conn.open(task())
            await stream.call_ids()
            conn.retire(lambda c: (idle.append(c), handed.set()))
            assert idle == []
            stream.replies.put_nowait(None)  # the worker hangs up
            with pytest.raises(pool.WorkerBroken):
                await asyncio.wait_for(call.receive(), WAIT_S)
            await asyncio.wait_for(handed.wait(), WAIT_S)  # (a loop turn after the call's end)
            assert idle == [conn]

    async def test_retire_should_hand_the_connection_over_at_once_when_idle(self, socket_path):
        idle: list[WorkerConnection] = []
        async with opened(f"unix:{socket_path}") as conn:
            conn.retire(idle.append)
            assert idle == [conn]

    async def test_close_should_fail_open_calls_and_be_idempotent(self, socket_path):
        """Test that closing fails a call still waiting with `WorkerBroken`, and a second close does nothing."""
        stream = Dispatching()
        async with FakeWorker(socket_path, stream.serve):
            conn = await connection(f"unix:{socket_path}")
            try:
                call = conn.open(task())
                await stream.call_ids()
                await conn.close()
                assert conn.closed
                with pytest.raises(pool.WorkerBroken):
                    await asyncio.wait_for(call.receive(), WAIT_S)
                await conn.close()
            finally:
                await conn.close()
                stream.replies.put_nowait(None)
