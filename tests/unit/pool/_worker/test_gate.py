"""Tests for pool._worker._gate: nothing a dialler sends is read past a handshake's size before it proved itself.

Includes the fuzz test of issue 43: garbage, truncations and hostile sizes
fed to the gate end in a closed connection (or, for a prefix of a genuine
handshake, a connection still waiting), holding a bounded number of bytes,
and never in an exception out of the protocol's callbacks.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pool._transport._framing import MessageStream, ProtocolError, hello
from pool._transport._handshake import Dialler, Keyring, Refused
from pool._transport._peer import trusted_uids
from pool._worker._gate import HOLD_BYTES, Doorman, Gate

UID = uuid.UUID(int=9)
KEYS = Keyring(["the secret"])


def framed(*messages: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(m)) + m for m in messages)


def handshake(method: str = "Dispatch", keys: Keyring = KEYS) -> tuple[Dialler, bytes]:
    dialler = Dialler(keys, method, UID)
    return dialler, framed(hello(method), dialler.challenge())


def unframed(data: bytes) -> bytes:
    (size,) = struct.unpack(">I", data[:4])
    assert len(data) == 4 + size
    return data[4:]


class TestGate:
    @settings(max_examples=50)
    @given(cuts=st.lists(st.integers(0, 400), max_size=8))
    def test_a_genuine_dialler_should_get_in_however_its_bytes_are_split(self, cuts):
        dialler, opening = handshake()
        gate = Gate(KEYS, UID)
        replies = [r for chunk in split(opening, cuts) for r in gate.feed(chunk)]
        assert len(replies) == 1 and not gate.open
        pipelined = framed(b"first frames")
        gate.feed(framed(dialler.proof(unframed(replies[0]))) + pipelined)
        assert gate.open and gate.method == "Dispatch"
        assert gate.rest() == pipelined  # what followed the proof, untouched, for the stream

    def test_a_dialler_without_the_secret_should_be_refused_with_a_reply(self):
        _, opening = handshake(keys=Keyring(["another"]))
        with pytest.raises(Refused) as refused:
            Gate(KEYS, UID).feed(opening)
        assert b"no secret in common" in refused.value.reply

    def test_a_hostile_size_should_be_refused_before_its_body(self):
        """Test that a length of 4 GiB ends the connection at its 4th byte (nothing is awaited, nothing held)."""
        with pytest.raises(ProtocolError):
            Gate(KEYS, UID).feed(b"\xff\xff\xff\xff")
        gate = Gate(KEYS, UID)
        gate.feed(framed(hello("Dispatch")))
        with pytest.raises(ProtocolError, match="before the handshake ended"):
            gate.feed(struct.pack(">I", 300 << 20))  # a 300 MB "challenge"

    def test_a_proof_that_does_not_verify_should_be_refused(self):
        _, opening = handshake()
        gate = Gate(KEYS, UID)
        gate.feed(opening)
        with pytest.raises(Refused):
            gate.feed(framed(b"LPP1" + bytes(32)))
        assert not gate.open


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(edges)]


class Transport:
    """Just enough of a transport for a doorman fed by hand, on a real socket (its peer's uid is ours)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.written = bytearray()
        self.reading = True
        self.closed = ""
        self.protocol: object = None

    def get_extra_info(self, name: str) -> object:
        return self.sock if name == "socket" else None

    def write(self, data: bytes) -> None:
        self.written += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def abort(self) -> None:
        self.closed = self.closed or "aborted"

    def close(self) -> None:
        self.closed = self.closed or "closed"

    def is_closing(self) -> bool:
        return bool(self.closed)

    def set_protocol(self, protocol: object) -> None:
        self.protocol = protocol

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def opened(chunks: list[bytes]) -> tuple[Doorman, Transport, list[tuple[str, MessageStream]]]:
    """A doorman fed ``chunks`` on a fresh transport; and who it admitted."""
    a, b = socket.socketpair()
    admitted: list[tuple[str, MessageStream]] = []
    transport = Transport(a)
    doorman = Doorman(Gate(KEYS, UID), trusted_uids(), lambda m, s: admitted.append((m, s)), lambda d: None)

    async def feed() -> None:
        doorman.connection_made(transport)  # type: ignore[arg-type]
        for chunk in chunks:
            doorman.data_received(chunk)
            if transport.closed:
                break
        doorman.connection_lost(None)

    try:
        asyncio.run(feed())
    finally:
        a.close()
        b.close()
    return doorman, transport, admitted


OPENING = handshake()[1]
"""A genuine dialler's opening (hello and challenge), fed whole or truncated."""

hostile_sizes = st.sampled_from([0, 1, 63, 64, 65, 255, 256, 257, 1 << 20, (1 << 32) - 1]).map(
    lambda n: struct.pack(">I", n)
)


class TestDoormanFuzz:
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        parts=st.lists(
            st.one_of(
                st.binary(max_size=300),  # garbage
                hostile_sizes,  # a length prefix of any size, alone
                st.builds(lambda n, body: n + body, hostile_sizes, st.binary(max_size=80)),
                st.just(OPENING),  # a genuine opening, whole
                st.integers(1, len(OPENING)).map(lambda n: OPENING[:n]),  # truncated
                st.integers(1, 4).map(lambda n: b"\0" * (HOLD_BYTES // n)),  # a flood
            ),
            max_size=8,
        )
    )
    def test_garbage_should_close_the_connection_holding_little_and_raise_nothing(self, parts):
        """Test that whatever an unauthenticated dialler sends, the doorman never admits it, never raises,
        holds at most `HOLD_BYTES` past what one read brings, and ends the connection or keeps waiting."""
        doorman, transport, admitted = opened(parts)
        assert admitted == []  # nobody who did not prove the secret gets a stream
        held = doorman._gate.held
        assert held <= HOLD_BYTES + max((len(p) for p in parts), default=0)
        if held > HOLD_BYTES:
            assert not transport.reading or transport.closed  # the rest waits in the kernel
        if OPENING not in b"".join(parts):
            assert b"LPA1" not in transport.written  # only a whole challenge gets an answer

    def test_a_genuine_dialler_should_become_a_stream(self):
        dialler, opening = handshake("State")
        a, b = socket.socketpair()
        admitted: list[tuple[str, MessageStream]] = []
        transport = Transport(a)
        doorman = Doorman(Gate(KEYS, UID), trusted_uids(), lambda m, s: admitted.append((m, s)), lambda d: None)

        async def run() -> None:
            doorman.connection_made(transport)  # type: ignore[arg-type]
            doorman.data_received(opening)
            answer = unframed(bytes(transport.written))
            doorman.data_received(framed(dialler.proof(answer), b"request"))

        try:
            asyncio.run(run())
        finally:
            a.close()
            b.close()
        ((method, stream),) = admitted
        assert method == "State" and transport.protocol is stream
        assert asyncio.run(stream.receive()) == b"request"
