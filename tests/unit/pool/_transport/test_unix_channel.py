"""Tests for pool._transport._unix_channel: a pool's connections to a worker's unix socket, against a fake worker.

The fake worker (`FakeWorker`) listens on a real unix socket in a short
temporary directory and speaks the wire format of `_framing` with a real
`Responder` (`_handshake`); each test gives it what to do once the pool has
proven itself, or how to misbehave before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

import pool
from pool._transport import _side
from pool._transport._framing import ProtocolError
from pool._transport._handshake import Refused
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._session import Session
from pool._transport._unix_channel import REPLY_MAX_BYTES, SIDE_OK, UnixChannel
from tests.unit.pool._transport.fake_worker import WAIT_S, WORKER, FakeWorker, framed, read_message, trust


@pytest.fixture
def socket_path() -> Iterator[str]:
    """A unix socket path short enough for AF_UNIX (tmp_path's can be over 108 bytes)."""
    with tempfile.TemporaryDirectory(prefix="lp-uc-") as folder:
        yield os.path.join(folder, "w.sock")


@pytest.fixture(autouse=True)
def side_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """A channel says large values go out of band (`_side.expect`): put the process-wide flag back after."""
    monkeypatch.setattr(_side, "_expected", _side._expected)


@contextlib.asynccontextmanager
async def channel(path: str, uid: uuid.UUID | None = WORKER, **kwargs) -> AsyncIterator[UnixChannel]:
    unix = UnixChannel(path, trust(**kwargs) if kwargs else trust(), uid)
    try:
        yield unix
    finally:
        await unix.close()


def describe(exc: BaseException) -> BaseException:
    return pool.WorkerBroken(f"lost: {exc}")


class TestUnixChannel:
    async def test_state_should_return_the_worker_state_once_both_ends_proved_themselves(self, socket_path):
        """Test that State crosses after the handshake, and its reply is decoded."""
        async with FakeWorker(socket_path) as worker, channel(socket_path) as unix:
            state = await unix.state(WAIT_S)
            assert (state.uid, state.capacity) == (str(WORKER), 3)
            assert worker.proven == ["State"]
            assert worker.requests == [pb.StateRequest().SerializeToString()]

    async def test_stop_should_send_the_grace_it_was_given(self, socket_path):
        """Test that Stop carries its grace to the worker."""
        async with FakeWorker(socket_path) as worker, channel(socket_path) as unix:
            await unix.stop(2.5, WAIT_S)
            assert worker.proven == ["Stop"]
            assert pb.StopRequest.FromString(worker.requests[0]).grace == 2.5

    async def test_a_probe_should_learn_the_uid_the_worker_proved(self, socket_path):
        """Test that a channel dialled with no uid takes the one the worker proves (a discovery probe)."""
        async with FakeWorker(socket_path), channel(socket_path, uid=None) as unix:
            await unix.state(WAIT_S)
            assert unix.uid == WORKER

    async def test_a_worker_proving_another_uid_should_be_refused_before_the_pool_proves_itself(self, socket_path):
        """Test that a socket whose worker is not the one dialled gets no proof, and no request."""
        async with FakeWorker(socket_path, uid=uuid.UUID(int=2)) as worker, channel(socket_path) as unix:
            with pytest.raises(Refused, match="not 00000000-0000-0000-0000-0000000a11ce"):
                await unix.state(WAIT_S)
            assert worker.proven == [] and worker.requests == []

    async def test_a_worker_without_the_secret_should_be_refused_with_its_reason(self, socket_path):
        """Test that a worker holding no secret in common refuses, and the pool raises `Refused` saying so."""
        async with FakeWorker(socket_path, keys=("another",)) as worker, channel(socket_path) as unix:
            with pytest.raises(Refused, match="no secret in common"):
                await unix.state(WAIT_S)
            assert worker.proven == []

    async def test_a_worker_of_an_untrusted_uid_should_be_refused_before_anything_is_sent(self, socket_path):
        """Test that the peer's uid (SO_PEERCRED) is checked first: nothing, not even the hello, is sent to it."""
        seen: list[bytes] = []

        async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(await reader.read())
            writer.close()

        server = await asyncio.start_unix_server(record, socket_path)
        try:
            async with channel(socket_path, uids=frozenset({os.getuid() + 1})) as unix:
                with pytest.raises(Refused, match=f"runs as uid {os.getuid()}"):
                    await unix.state(WAIT_S)
                assert repr(unix).endswith("connections=0>")
        finally:
            server.close()
            await server.wait_closed()
        assert seen in ([], [b""])

    async def test_a_worker_that_hangs_up_during_the_handshake_should_be_a_reset(self, socket_path):
        """Test that a peer closing instead of answering the challenge is a lost connection, not a hang."""

        async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_message(reader)  # the hello
            await read_message(reader)  # the challenge
            writer.close()

        server = await asyncio.start_unix_server(hang_up, socket_path)
        try:
            async with channel(socket_path) as unix:
                with pytest.raises(ConnectionResetError, match="hung up during the handshake"):
                    await unix.state(WAIT_S)
        finally:
            server.close()
            await server.wait_closed()

    async def test_a_large_message_before_the_proof_should_be_a_protocol_error_unread(self, socket_path):
        """Test that before the worker proved itself, a message over a handshake's size is not read."""

        async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_message(reader)
            await read_message(reader)
            writer.write(struct.pack(">I", 1 << 20))  # announces a MiB: the pool must not wait for it
            await writer.drain()
            await reader.read()
            writer.close()

        server = await asyncio.start_unix_server(flood, socket_path)
        try:
            async with channel(socket_path) as unix:
                with pytest.raises(ProtocolError, match="over this stream's limit of 256"):
                    await unix.state(WAIT_S)
        finally:
            server.close()
            await server.wait_closed()

    async def test_a_reply_over_the_reply_limit_should_be_a_protocol_error(self, socket_path):
        """Test that a proven worker still cannot make a State call read more than `REPLY_MAX_BYTES`."""

        async def oversized(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_message(reader)
            writer.write(framed(b"x" * (REPLY_MAX_BYTES + 1)))
            await reader.read()

        async with FakeWorker(socket_path, oversized), channel(socket_path) as unix:
            with pytest.raises(ProtocolError):
                await unix.state(WAIT_S)

    async def test_a_worker_that_closes_without_answering_should_be_a_reset_naming_the_method(self, socket_path):
        async def no_answer(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_message(reader)

        async with FakeWorker(socket_path, no_answer), channel(socket_path) as unix:
            with pytest.raises(ConnectionResetError, match="without answering Stop"):
                await unix.stop(0.0, WAIT_S)

    async def test_state_should_time_out_when_the_worker_never_answers(self, socket_path):
        """Test that a worker that goes silent costs the caller its timeout, and the connection is closed."""
        release = asyncio.Event()

        async def silent(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await release.wait()

        async with FakeWorker(socket_path, silent), channel(socket_path) as unix:
            try:
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(unix.state(0.5), WAIT_S)  # (in the handshake or after: a timeout either way)
                assert repr(unix).endswith("connections=0>")
            finally:
                release.set()

    async def test_a_missing_socket_should_raise_an_os_error(self, socket_path):
        async with channel(socket_path) as unix:
            with pytest.raises(FileNotFoundError):
                await unix.state(WAIT_S)

    async def test_close_should_close_every_open_connection(self, socket_path):
        """Test that close ends a call still waiting on its worker (the pool is shutting down)."""
        release = asyncio.Event()

        async def silent(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await release.wait()

        async with FakeWorker(socket_path, silent) as worker, channel(socket_path) as unix:
            try:
                state = asyncio.ensure_future(unix.state(WAIT_S))
                await asyncio.wait_for(worker.arrived.wait(), WAIT_S)
                await unix.close()
                assert repr(unix).endswith("connections=0>")
                with pytest.raises(ConnectionError):
                    await asyncio.wait_for(state, WAIT_S)
            finally:
                release.set()


class TestSideConnection:
    async def test_open_side_should_register_a_side_channel_when_the_worker_says_ok(self, socket_path):
        """Test that the Buffers connection is proven like any other, then registered for this worker."""
        async with FakeWorker(socket_path) as worker, channel(socket_path) as unix:
            side = await unix._open_side()
            try:
                assert side is not None and not side.closed
                assert _side.channel(unix) is side
                assert worker.proven == ["Buffers"]
            finally:
                if side is not None:
                    side.close()
            assert _side.channel(unix) is None

    async def test_open_side_should_give_none_when_the_worker_does_not_take_one(self, socket_path):
        """Test that a worker answering Buffers with anything but ``ok`` leaves large values in band."""

        async def declines(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(framed(b"no"))
            await reader.read()

        async with FakeWorker(socket_path, declines), channel(socket_path) as unix:
            assert await unix._open_side() is None
            assert _side.channel(unix) is None

    async def test_open_side_should_give_none_when_the_worker_refuses_the_pool(self, socket_path):
        async with FakeWorker(socket_path, keys=("another",)), channel(socket_path) as unix:
            assert await unix._open_side() is None

    async def test_open_side_should_give_none_when_the_answer_is_over_a_handshake(self, socket_path):
        """Test that the side connection, too, reads nothing larger than a handshake before the proof."""

        async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_message(reader)
            await read_message(reader)
            writer.write(struct.pack(">I", 1 << 20))
            await reader.read()
            writer.close()

        server = await asyncio.start_unix_server(flood, socket_path)
        try:
            async with channel(socket_path) as unix:
                assert await unix._open_side() is None
        finally:
            server.close()
            await server.wait_closed()


class TestRun:
    async def test_run_should_fail_the_session_and_return_when_the_worker_is_unreachable(self, socket_path):
        """Test that an unreachable worker fails the calls on its session with the described error."""
        session = Session(odd=True, host=None, label="test")
        async with channel(socket_path) as unix:
            await asyncio.wait_for(unix.run(session, describe), WAIT_S)
        assert isinstance(session.failure, pool.WorkerBroken)
        assert "No such file" in str(session.failure)

    async def test_run_should_fail_the_session_when_the_worker_refuses_the_pool(self, socket_path):
        session = Session(odd=True, host=None, label="test")
        async with FakeWorker(socket_path, keys=("another",)), channel(socket_path) as unix:
            await asyncio.wait_for(unix.run(session, describe), WAIT_S)
        assert "no secret in common" in str(session.failure)

    async def test_run_should_pump_the_session_until_the_worker_ends_the_stream(self, socket_path):
        """Test that a proven Dispatch stream runs the session, a side connection opens beside it, and both
        end (the side connection closed) when the worker hangs up."""
        hang_up = asyncio.Event()
        received: list[bytes] = []

        async def dispatch(method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if method == "Buffers":
                writer.write(framed(SIDE_OK))
                await reader.read()
                return
            received.append(await read_message(reader))  # the session's first batch
            await hang_up.wait()

        session = Session(odd=True, host=None, label="test")
        async with FakeWorker(socket_path, dispatch) as worker, channel(socket_path) as unix:
            running = asyncio.ensure_future(unix.run(session, describe))
            try:
                call, _ = session.open("routine")
                session.finish()  # (ends the outbox once the Call frame left)
                await asyncio.wait_for(worker.arrived.wait(), WAIT_S)
                hang_up.set()
                await asyncio.wait_for(running, WAIT_S)
            finally:
                running.cancel()
            assert "Dispatch" in worker.proven
            assert isinstance(call.final, pool.WorkerBroken)  # the call learnt the stream's end
            assert _side.channel(unix) is None  # closed with the stream
            assert repr(unix).endswith("connections=0>")
        assert [frame.id for frame in pb.Frames.FromString(received[0]).frames] == [call.id]


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (Refused("no secret"), "UNAUTHENTICATED"),
        (ProtocolError("bad length"), "INTERNAL"),
        (ConnectionResetError(), "UNAVAILABLE"),
        (TimeoutError(), "UNAVAILABLE"),
    ],
)
def test_failure_should_map_each_end_of_a_stream_to_a_status_with_a_detail(reason, code):
    """Test that a refusal is a hard UNAUTHENTICATED, and that an exception without a message still says what it was."""
    got, detail = UnixChannel.failure(reason)
    assert got == code
    assert detail == (str(reason) or type(reason).__name__)
