"""Tests for pool._transport._framing: length-prefixed messages, however the bytes are split, over a real socket pair too."""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from pool._transport import _rpc
from pool._transport._framing import HELLO_MAX_BYTES, MessageStream, ProtocolError, hello, method_of
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._unix_channel import UnixChannel


class Transport:
    """Just enough of a transport for a stream fed by hand: records flow control."""

    def __init__(self):
        self.reading = True
        self.aborted = False

    def set_write_buffer_limits(self, high=None, low=None):
        pass

    def pause_reading(self):
        self.reading = False

    def resume_reading(self):
        self.reading = True

    def abort(self):
        self.aborted = True

    def is_closing(self):
        return self.aborted

    def get_write_buffer_size(self):
        return 0


def framed(messages: list[bytes]) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


async def drain(stream: MessageStream, count: int) -> list[bytes]:
    return [bytes(await stream.receive()) for _ in range(count)]


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(st.binary(max_size=300), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=30),
)
def test_messages_should_come_out_whole_and_in_order_however_the_bytes_are_split(messages, cuts):
    stream = MessageStream()
    stream.connection_made(Transport())
    for chunk in chunks(framed(messages), cuts):
        stream.data_received(chunk)
    stream.eof_received()
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(drain(stream, len(messages))) == messages
        assert loop.run_until_complete(stream.receive()) is None  # then a clean end
    finally:
        loop.close()


def test_a_first_message_over_the_limit_should_end_the_stream_before_its_body_arrives():
    stream = MessageStream(HELLO_MAX_BYTES)
    transport = Transport()
    stream.connection_made(transport)
    stream.data_received(b"GET / HTTP/1.1\r\n")  # "GET " read as a length: ~1.2 GB
    assert transport.aborted
    with pytest.raises(ProtocolError):
        asyncio.run(stream.receive())


def test_the_limit_should_hold_for_every_message_until_it_is_raised():
    """Test that a stream's limit holds past its first message (a dialler keeps a handshake's size until
    the worker proved itself: issue 43), and that raising it lets larger messages through."""
    stream = MessageStream(HELLO_MAX_BYTES)
    transport = Transport()
    stream.connection_made(transport)
    stream.data_received(framed([hello("Dispatch")]))
    assert asyncio.run(drain(stream, 1)) == [hello("Dispatch")]
    stream.limit = 20_000
    big = b"x" * 10_000
    stream.data_received(framed([big]))
    assert asyncio.run(drain(stream, 1)) == [big]
    stream.limit = HELLO_MAX_BYTES
    stream.data_received(framed([big]))
    assert transport.aborted


def test_reading_should_pause_while_too_many_messages_wait_and_resume_once_read():
    stream = MessageStream()
    transport = Transport()
    stream.connection_made(transport)
    stream.data_received(framed([b"m"] * 1000))
    assert not transport.reading
    assert asyncio.run(drain(stream, 1000)) == [b"m"] * 1000
    assert transport.reading


@pytest.mark.parametrize(
    ("message", "method"),
    [
        (hello("Dispatch"), "Dispatch"),
        (hello("State"), "State"),
        (hello("Stop"), "Stop"),
        (hello("Drop"), None),
        (b"leakypool-local/1 Dispatch", None),  # a release before the handshake (issue 43): turned away
        (b"\xff\xfe", None),
        (None, None),
    ],
)
def test_method_of_should_accept_only_our_hellos(message, method):
    assert method_of(message) == method


async def test_frames_should_cross_a_real_socket_both_ways_large_and_small():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    loop = asyncio.get_running_loop()
    _, a = await loop.create_unix_connection(MessageStream, sock=left)
    _, b = await loop.create_unix_connection(MessageStream, sock=right)
    try:
        big = pb.Frames()
        big.frames.add(id=1).outcome.value = b"\x00" * (3 << 20)  # over the write high-water mark
        small = pb.Frames()
        small.frames.add(id=2).accept.SetInParent()
        sending = asyncio.ensure_future(asyncio.gather(a.write_frames(big), a.write_frames(small)))
        received = [await asyncio.wait_for(b.read_frames(), 30) for _ in range(2)]
        await asyncio.wait_for(sending, 30)
        assert received == [big, small]
        a.close()
        assert await asyncio.wait_for(b.read_frames(), 30) is None
        with pytest.raises(ConnectionError):
            await a.send(b"after close")
    finally:
        a.close()
        b.close()


def test_an_attached_sink_should_get_every_message_as_it_arrives_queued_ones_first():
    stream = MessageStream()
    stream.connection_made(Transport())
    stream.data_received(framed([b"early"]))
    got: list[bytes] = []
    stream.attach(lambda message: got.append(bytes(message)))
    assert got == [b"early"]
    data = framed([b"one", b"two", b"three"])
    stream.data_received(data[:5])
    stream.data_received(data[5:])
    assert got == [b"early", b"one", b"two", b"three"]


async def test_a_sink_that_raises_should_end_the_stream_with_its_error():
    stream = MessageStream()
    transport = Transport()
    stream.connection_made(transport)
    stream.attach(lambda message: pb.Frames.FromString(message))
    stream.data_received(framed([b"\xff\xff not protobuf"]))
    with pytest.raises(DecodeError):
        await asyncio.wait_for(stream.receive(), 5)
    assert transport.aborted


async def test_write_now_should_send_at_once_and_refuse_once_closed():
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    loop = asyncio.get_running_loop()
    _, a = await loop.create_unix_connection(MessageStream, sock=left)
    _, b = await loop.create_unix_connection(MessageStream, sock=right)
    try:
        small = pb.Frames()
        small.frames.add(id=2).accept.SetInParent()
        big = pb.Frames()
        big.frames.add(id=3).outcome.value = b"\x01" * (100 << 10)  # over SMALL_MESSAGE_BYTES: no copy
        assert a.write_frames_now(small) and a.write_frames_now(big)
        assert [await asyncio.wait_for(b.read_frames(), 30) for _ in range(2)] == [small, big]
        a.close()
        assert not a.write_frames_now(small)
    finally:
        a.close()
        b.close()


def test_status_names_should_match_grpc():
    """pool._transport._rpc spells the gRPC status codes itself (so a worker need not import grpc): they must agree."""
    for code in grpc.StatusCode:
        assert _rpc.status_name(code.value[0]) == code.name
    assert _rpc.status_name(99) == "CODE_99"


def test_a_connection_closed_in_the_middle_of_a_message_should_be_an_error_not_a_clean_end():
    stream = MessageStream()
    stream.connection_made(Transport())
    stream.data_received(framed([b"whole"]) + struct.pack(">I", 10) + b"half")
    stream.eof_received()
    loop = asyncio.new_event_loop()
    try:
        assert bytes(loop.run_until_complete(stream.receive())) == b"whole"
        with pytest.raises(ConnectionResetError, match="8 bytes into a message"):
            loop.run_until_complete(stream.receive())
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("reason", "code"),
    [
        (ProtocolError("bad length"), "INTERNAL"),
        (DecodeError("not Frames"), "INTERNAL"),
        (ConnectionResetError("gone"), "UNAVAILABLE"),
        (FileNotFoundError("no socket"), "UNAVAILABLE"),
    ],
)
def test_a_unix_channel_should_call_bytes_that_are_not_our_protocol_a_hard_fault(reason, code):
    """Test that a worker speaking garbage is evicted (hard code), while one that went away is kept (transient)."""
    assert UnixChannel.failure(reason)[0] == code
    assert (code in _rpc.TRANSIENT_CODES) is (code == "UNAVAILABLE")


def test_busy_at_should_count_a_message_still_arriving_only_while_its_bytes_move():
    """Test that a partly received message makes the stream busy while bytes arrive, and only then (issue 34)."""
    stream = MessageStream()
    stream.connection_made(Transport())
    assert stream.busy_at() == float("-inf")  # nothing ever moved
    data = framed([b"x" * 1000])
    stream.data_received(data[:300])
    first = stream.busy_at()
    assert first > float("-inf")  # mid-message, and bytes moved since the last ask
    assert stream.busy_at() == first  # nothing moved since: a peer that stopped writing is not busy
    stream.data_received(data[300:])  # the message is whole: its end is the last busy moment
    assert stream.busy_at() >= first


async def test_busy_at_should_not_count_a_write_the_peer_does_not_read():
    """Test that a large write a peer leaves unread stops counting as busy once nothing moves (a stopped worker)."""
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    _, a = await asyncio.get_running_loop().create_unix_connection(MessageStream, sock=left)
    try:
        assert a.write_now(b"x" * (16 << 20))  # more than the kernel's buffers take: the rest waits here
        first = a.busy_at()
        assert first > float("-inf")
        assert a.busy_at() == first  # the peer reads nothing: the window is not held open
    finally:
        a.close()
        right.close()


class TestReadRest:
    """`MessageStream.read_rest` on a real unix socket pair: what a peer wrote before it went is all read."""

    @staticmethod
    async def _pair() -> tuple[MessageStream, socket.socket]:
        ours, theirs = socket.socketpair()
        _, stream = await asyncio.get_running_loop().connect_accepted_socket(
            lambda: MessageStream(read_rest=True), ours
        )
        return stream, theirs

    @staticmethod
    def _framed(message: bytes) -> bytes:
        return struct.pack(">I", len(message)) + message

    async def test_a_live_peer_should_never_count_as_read_to_its_end(self):
        stream, theirs = await self._pair()
        try:
            theirs.sendall(self._framed(b"more to come"))
            assert stream.read_rest() is False
        finally:
            stream.close()
            theirs.close()

    @pytest.mark.parametrize("reset", [False, True])
    async def test_a_peer_gone_should_have_its_last_message_read_before_the_end(self, reset):
        """Test both ends a dead worker's socket shows: EOF, and the reset of one that left bytes unread."""
        stream, theirs = await self._pair()
        try:
            if reset:
                assert stream.write_now(b"never read")  # left in the peer's buffer: its close resets ours
            theirs.sendall(self._framed(b"last words"))
            theirs.close()
            assert stream.read_rest() is True
            async with asyncio.timeout(5):
                assert bytes(await stream.receive()) == b"last words"
        finally:
            stream.close()
