"""Tests for pool._transport._grpc_channel: a pool's calls to a worker over gRPC, against a fake worker.

The fake worker is a real ``grpc.aio`` server on 127.0.0.1 serving the
worker service with a real `Responder` (`_handshake`); each test gives it
what to do once the pool proved itself, or how to misbehave before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest

import pool
from pool._transport._framing import ProtocolError
from pool._transport._grpc_channel import REPLY_MAX_BYTES, GrpcChannel
from pool._transport._handshake import Keyring, Refused, Responder
from pool._transport._pieces import pieces
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._rpc import SERVER_OPTIONS, SERVICE
from pool._transport._session import Session
from pool._transport._trust import Trust

WORKER = uuid.UUID(int=0xB0B)
SECRET = "shared secret"
WAIT_S = 30.0
"""Bound on every wait in these tests (each call takes milliseconds; this is for a loaded machine)."""

Serve = Callable[[str, Any], Awaitable[None]]


class FakeWorker:
    """A gRPC worker service: the worker's side of the handshake, then ``serve(method, context)``.

    Args:
        serve: What it does once the pool proved itself (None: answer State and Stop with one piece).
        keys: The secrets it holds.
        uid: The uid it proves.
        instead: What it does instead of answering the challenge (a peer that is not a worker), when given.
    """

    def __init__(
        self,
        serve: Serve | None = None,
        *,
        keys=(SECRET,),
        uid: uuid.UUID = WORKER,
        instead: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.serve = serve or self.reply
        self.keyring = Keyring(keys)
        self.uid = uid
        self.instead = instead
        self.proven: list[str] = []
        self.requests: list[bytes] = []

    def handler(self) -> grpc.GenericRpcHandler:
        def method(name: str) -> grpc.RpcMethodHandler:
            async def run(requests: Any, context: Any) -> None:
                await self._call(name, context)

            return grpc.stream_stream_rpc_method_handler(run)

        return grpc.method_handlers_generic_handler(
            SERVICE, {name: method(name) for name in ("Dispatch", "State", "Stop")}
        )

    async def _call(self, method: str, context: Any) -> None:
        responder = Responder(self.keyring, method, self.uid)
        challenge = await context.read()
        if self.instead is not None:
            await self.instead(context)
            return
        try:
            await context.write(responder.answer(challenge))
        except Refused as refused:
            await context.write(refused.reply)
            return
        responder.check(await context.read())
        self.proven.append(method)
        await self.serve(method, context)

    async def reply(self, method: str, context: Any) -> None:
        """A well-behaved worker."""
        self.requests.append((await context.read())[1:])  # a piece: the flag byte, then the message
        state = pb.WorkerState(uid=str(self.uid), pid=os.getpid(), capacity=5)
        await context.write(next(pieces(state.SerializeToString())))


@contextlib.asynccontextmanager
async def serving(worker: FakeWorker) -> AsyncIterator[str]:
    """Serve ``worker`` on 127.0.0.1 (a free port); its address."""
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((worker.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(grace=None)


@contextlib.asynccontextmanager
async def channel(
    address: str, uid: uuid.UUID | None = WORKER, *, secret: str = SECRET, uids: frozenset[int] | None = None
) -> AsyncIterator[GrpcChannel]:
    trust = Trust(Keyring([secret]), frozenset({os.getuid()}) if uids is None else uids)
    grpc_channel = GrpcChannel(address, trust, uid)
    try:
        yield grpc_channel
    finally:
        await grpc_channel.close()


def describe(exc: BaseException) -> BaseException:
    return pool.WorkerBroken(f"lost: {exc}")


class TestGrpcChannel:
    async def test_state_should_return_the_worker_state_once_both_ends_proved_themselves(self):
        """Test that State crosses after the handshake, as one piece, and its reply is decoded."""
        worker = FakeWorker()
        async with serving(worker) as address, channel(address) as grpc_channel:
            state = await grpc_channel.state(WAIT_S)
        assert (state.uid, state.capacity) == (str(WORKER), 5)
        assert worker.proven == ["State"]
        assert worker.requests == [pb.StateRequest().SerializeToString()]

    async def test_stop_should_send_the_grace_it_was_given(self):
        worker = FakeWorker()
        async with serving(worker) as address, channel(address) as grpc_channel:
            await grpc_channel.stop(1.5, WAIT_S)
        assert worker.proven == ["Stop"]
        assert pb.StopRequest.FromString(worker.requests[0]).grace == 1.5

    async def test_a_probe_should_learn_the_uid_the_worker_proved(self):
        """Test that a channel dialled with no uid takes the one the worker proves (a discovery probe)."""
        async with serving(FakeWorker()) as address, channel(address, uid=None) as grpc_channel:
            await grpc_channel.state(WAIT_S)
            assert grpc_channel.uid == WORKER

    async def test_a_worker_proving_another_uid_should_be_refused_before_any_request(self):
        worker = FakeWorker(uid=uuid.UUID(int=3))
        async with serving(worker) as address, channel(address) as grpc_channel:
            with pytest.raises(Refused, match="not 00000000-0000-0000-0000-000000000b0b"):
                await grpc_channel.state(WAIT_S)
        assert worker.proven == [] and worker.requests == []

    async def test_a_worker_without_the_secret_should_be_refused_with_its_reason(self):
        worker = FakeWorker(keys=("another",))
        async with serving(worker) as address, channel(address) as grpc_channel:
            with pytest.raises(Refused, match="no secret in common"):
                await grpc_channel.state(WAIT_S)
        assert worker.proven == []

    async def test_an_answer_larger_than_a_handshake_should_be_refused_unparsed(self):
        """Test that a peer answering the challenge with more than a handshake's bytes is not a worker."""

        async def large(context: Any) -> None:
            await context.write(b"x" * 1000)

        async with serving(FakeWorker(instead=large)) as address, channel(address) as grpc_channel:
            with pytest.raises(Refused, match="1000 bytes"):
                await grpc_channel.state(WAIT_S)

    async def test_a_worker_that_ends_the_call_should_raise_its_status(self):
        """Test that a call the worker ends during the handshake raises the worker's own code and detail."""

        async def abort(context: Any) -> None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "draining")

        async with serving(FakeWorker(instead=abort)) as address, channel(address) as grpc_channel:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await grpc_channel.state(WAIT_S)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert error.value.details() == "draining"
        assert GrpcChannel.failure(error.value) == ("RESOURCE_EXHAUSTED", "draining")

    async def test_a_reply_in_more_than_one_piece_should_be_a_protocol_error(self):
        async def two_pieces(method: str, context: Any) -> None:
            await context.read()
            await context.write(b"\1" + b"x" * 10)  # "more follow"

        async with serving(FakeWorker(two_pieces)) as address, channel(address) as grpc_channel:
            with pytest.raises(ProtocolError, match="more than one piece"):
                await grpc_channel.state(WAIT_S)

    async def test_a_reply_over_the_reply_limit_should_be_a_protocol_error(self):
        async def oversized(method: str, context: Any) -> None:
            await context.read()
            await context.write(b"\0" + b"x" * (REPLY_MAX_BYTES + 1))

        async with serving(FakeWorker(oversized)) as address, channel(address) as grpc_channel:
            with pytest.raises(ProtocolError, match="limit"):
                await grpc_channel.state(WAIT_S)

    async def test_a_worker_that_ends_without_replying_should_raise_its_status(self):
        async def no_reply(method: str, context: Any) -> None:
            await context.read()

        async with serving(FakeWorker(no_reply)) as address, channel(address) as grpc_channel:
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await grpc_channel.state(WAIT_S)
        assert error.value.code() == grpc.StatusCode.OK  # ended cleanly, but with no answer: still an error

    async def test_a_loopback_worker_of_an_untrusted_uid_should_be_refused_after_its_proof(self):
        """Test that on loopback the sockets at the worker's port must be a trusted uid's (a relay's are not)."""
        worker = FakeWorker()
        async with serving(worker) as address, channel(address, uids=frozenset({os.getuid() + 1})) as grpc_channel:
            with pytest.raises(Refused, match=f"uid {os.getuid()}, which this process does not trust"):
                await grpc_channel.state(WAIT_S)
        assert worker.requests == []


class TestRun:
    async def test_run_should_fail_the_session_and_return_when_nothing_listens(self):
        """Test that an unreachable worker fails the calls on its session with the described error."""
        async with serving(FakeWorker()) as address:
            pass  # the port is free again
        session = Session(odd=True, host=None, label="test")
        async with channel(address) as grpc_channel:
            await asyncio.wait_for(grpc_channel.run(session, describe), WAIT_S)
        assert isinstance(session.failure, pool.WorkerBroken)
        assert "nothing listens at" in str(session.failure)  # (on loopback the pool looks before it dials: issue 51)

    async def test_run_should_fail_the_session_when_the_worker_refuses_the_pool(self):
        session = Session(odd=True, host=None, label="test")
        async with serving(FakeWorker(keys=("another",))) as address, channel(address) as grpc_channel:
            await asyncio.wait_for(grpc_channel.run(session, describe), WAIT_S)  # (a Refused is a ConnectionError)
        assert "no secret in common" in str(session.failure)

    async def test_run_should_carry_the_session_frames_in_pieces_both_ways(self):
        """Test that a proven Dispatch stream carries the session's frames as pieces, and the worker's back."""
        received: list[pb.Frames] = []
        answered = asyncio.Event()

        async def dispatch(method: str, context: Any) -> None:
            piece = await context.read()
            assert piece[:1] == b"\0"
            frames = pb.Frames.FromString(piece[1:])
            received.append(frames)
            reply = pb.Frames()
            reply.frames.add(id=frames.frames[0].id).reject.message = "busy"
            for out in pieces(reply.SerializeToString()):
                await context.write(out)
            await answered.wait()

        session = Session(odd=True, host=None, label="test")
        async with serving(FakeWorker(dispatch)) as address, channel(address) as grpc_channel:
            running = asyncio.ensure_future(grpc_channel.run(session, describe))
            try:
                call, _ = session.open("routine")
                frame = await asyncio.wait_for(call.receive(), WAIT_S)
                assert frame.reject.message == "busy"
                answered.set()
                await asyncio.wait_for(running, WAIT_S)
            finally:
                answered.set()
                running.cancel()
        assert [f.id for f in received[0].frames] == [call.id]
        assert session.failure is not None  # the worker ended the stream: the session is over


@pytest.mark.parametrize(
    ("reason", "code", "detail"),
    [
        (Refused("no secret"), "UNAUTHENTICATED", "no secret"),
        (ProtocolError("bad piece"), "INTERNAL", "bad piece"),
        (ConnectionResetError(), "UNAVAILABLE", "ConnectionResetError"),
        (
            grpc.aio.AioRpcError(grpc.StatusCode.PERMISSION_DENIED, grpc.aio.Metadata(), grpc.aio.Metadata(), None),
            "PERMISSION_DENIED",
            "",
        ),
    ],
)
def test_failure_should_map_each_end_of_a_stream_to_a_status_with_a_detail(reason, code, detail):
    """Test that a gRPC status keeps its own code, a refusal is UNAUTHENTICATED, garbage is INTERNAL, anything else
    UNAVAILABLE (gone, for now), each with a detail that is never None."""
    assert GrpcChannel.failure(reason) == (code, detail)
