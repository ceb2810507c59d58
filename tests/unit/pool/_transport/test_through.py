"""Tests for pool._transport._through: a unix stream written from a thread that is not its loop's."""

from __future__ import annotations

import asyncio
import socket
import threading

from pool._transport._framing import MessageStream
from pool._transport._proto import leakypool_pb2 as pb


def _frames(call_id: int) -> pb.Frames:
    frames = pb.Frames()
    frames.frames.add(id=call_id).started.SetInParent()
    return frames


async def _pair() -> tuple[MessageStream, socket.socket]:
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    _, stream = await loop.connect_accepted_socket(MessageStream, ours)
    return stream, theirs


def _read_messages(sock: socket.socket, count: int) -> list[bytes]:
    sock.settimeout(10)
    data, out = b"", []
    while len(out) < count:
        data += sock.recv(1 << 16)
        while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
            size = int.from_bytes(data[:4], "big")
            out.append(data[4 : 4 + size])
            data = data[4 + size :]
    return out


async def test_a_thread_write_should_be_on_the_wire_when_it_returns():
    """Test that send(land=True) from another thread returns True once the peer can read every byte."""
    stream, peer = await _pair()
    loop = asyncio.get_running_loop()
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(stream.through.send(_frames(3), True, loop)))
    thread.start()
    await asyncio.to_thread(thread.join, 10)
    assert result == [True]
    peer.setblocking(False)
    assert pb.Frames.FromString(_read_messages(peer, 1)[0]) == _frames(3)  # there without the loop's help
    stream.close()
    peer.close()


async def test_thread_and_loop_writes_should_never_interleave_within_a_message():
    """Test that many writes from a thread and from the loop at once reach the peer as whole messages."""
    stream, peer = await _pair()
    loop = asyncio.get_running_loop()
    count = 300
    reader = asyncio.ensure_future(asyncio.to_thread(_read_messages, peer, 2 * count))

    def from_thread() -> None:
        for i in range(count):
            assert stream.through.send(_frames(2 * i), False, loop)

    thread = threading.Thread(target=from_thread)
    thread.start()
    big = _frames(1)
    big.frames.add(id=1).outcome.value = b"x" * 200_000  # fills the socket now and then: bytes wait in the transport
    for _ in range(count):
        if not stream.write_frames_now(big):
            await stream.write_frames(big)
        await asyncio.sleep(0)
    await asyncio.to_thread(thread.join, 30)
    messages = await asyncio.wait_for(reader, 30)
    ids = [pb.Frames.FromString(m).frames[0].id for m in messages]  # every message parses: none was cut
    assert sorted(i for i in ids if i % 2 == 0) == [2 * i for i in range(count)]
    assert [i for i in ids if i % 2 == 0] == [2 * i for i in range(count)]  # the thread's in its order
    stream.close()
    peer.close()


async def test_a_thread_write_to_a_closed_stream_should_say_so():
    stream, peer = await _pair()
    stream.close()
    async with asyncio.timeout(5):
        while not stream.ended:  # the transport reports the connection lost within a turn or two
            await asyncio.sleep(0)
    assert not stream.through.send(_frames(3), True, asyncio.get_running_loop())
    peer.close()
