"""A fake worker's unix socket for unit tests of the pool's unix channel and connections (no worker process).

It listens on a real unix socket and speaks the wire format of `_framing`
with a real `Responder` (`_handshake`); each test gives it what to do once
the pool has proven itself, or how to misbehave before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import uuid
from collections.abc import Awaitable, Callable
from typing import Self

from pool._transport._framing import method_of
from pool._transport._handshake import Keyring, Refused, Responder
from pool._transport._proto import leakypool_pb2 as pb
from pool._transport._trust import Trust
from pool._transport._unix_channel import SIDE_OK

WORKER = uuid.UUID(int=0xA11CE)
SECRET = "shared secret"
WAIT_S = 30.0
"""Bound on every wait in these tests (each step takes milliseconds; this is for a loaded machine)."""

Serve = Callable[[str, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def framed(message: bytes) -> bytes:
    return struct.pack(">I", len(message)) + message


async def read_message(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">I", await reader.readexactly(4))
    return await reader.readexactly(size)


class FakeWorker:
    """A worker's unix socket: a hello, the worker's side of the handshake, then ``serve(method, reader, writer)``.

    Args:
        path: The socket to listen on.
        serve: What it does once the pool proved itself (None: answer State and Stop with a `pb.WorkerState`,
            ``ok`` a Buffers connection, and read a Dispatch stream to its end).
        keys: The secrets it holds.
        uid: The uid it proves.
    """

    def __init__(self, path: str, serve: Serve | None = None, *, keys=(SECRET,), uid: uuid.UUID = WORKER) -> None:
        self.path = path
        self.serve = serve or self.answer
        self.keyring = Keyring(keys)
        self.uid = uid
        self.proven: list[str] = []  # methods of the connections whose pool proved itself, in order
        self.requests: list[bytes] = []  # the State and Stop requests received
        self.received_before_proof: list[bytes] = []  # messages of connections that never proved themselves
        self.arrived = asyncio.Event()  # a connection proved itself
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_unix_server(self._connection, self.path)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()
        for writer in self._writers:
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            try:
                method = method_of(await read_message(reader))
                assert method is not None
                responder = Responder(self.keyring, method, self.uid)
                challenge = await read_message(reader)
                try:
                    writer.write(framed(responder.answer(challenge)))
                except Refused as refused:
                    writer.write(framed(refused.reply))
                    return
                proof = await read_message(reader)
                try:
                    responder.check(proof)
                except Refused:
                    self.received_before_proof.append(proof)
                    return
                self.proven.append(method)
                self.arrived.set()
                await self.serve(method, reader, writer)
            finally:
                writer.close()

    async def answer(self, method: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A well-behaved worker."""
        if method in ("State", "Stop"):
            self.requests.append(await read_message(reader))
            writer.write(framed(pb.WorkerState(uid=str(self.uid), pid=os.getpid(), capacity=3).SerializeToString()))
            await writer.drain()
        elif method == "Buffers":
            writer.write(framed(SIDE_OK))
            await reader.read()  # until the pool closes it
        else:
            await reader.read()


def trust(*secrets: str, uids: frozenset[int] | None = None) -> Trust:
    return Trust(Keyring(secrets or (SECRET,)), frozenset({os.getuid()}) if uids is None else uids)
