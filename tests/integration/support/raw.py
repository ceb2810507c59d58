"""Raw clients of a worker for tests: the handshake by hand, then whatever bytes a test wants to send.

No pool code but the handshake's own (`pool._transport._handshake`), so a
test can play a genuine dialler that then misbehaves, or one that holds the
wrong secret, or none.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

from pool._config._places import default_secret_file
from pool._transport._framing import hello
from pool._transport._handshake import Dialler, Keyring
from pool._transport._rpc import SERVICE
from pool._transport._secret import SecretSource

TIMEOUT_S = 30.0


def user_keyring() -> Keyring:
    """This session's per-user secret (see ``private_secret``), as a dialler's keys."""
    return Keyring((), SecretSource(default_path=default_secret_file()), create=True)


def framed(message: bytes) -> bytes:
    return struct.pack(">I", len(message)) + message


async def read_framed(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), TIMEOUT_S))[0]
    return await asyncio.wait_for(reader.readexactly(size), TIMEOUT_S)


async def unix_dial(
    path: str, method: str = "Dispatch", keyring: Keyring | None = None, uid: uuid.UUID | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the worker at unix socket ``path`` on which both ends proved themselves."""
    reader, writer = await asyncio.open_unix_connection(path)
    dialler = Dialler(keyring or user_keyring(), method, uid)
    writer.write(framed(hello(method)) + framed(dialler.challenge()))
    writer.write(framed(dialler.proof(await read_framed(reader))))
    return reader, writer


async def grpc_dial(channel: Any, method: str = "Dispatch", keyring: Keyring | None = None) -> Any:
    """A call of ``method`` on ``channel`` (a ``grpc.aio`` channel) on which both ends proved themselves."""
    call = channel.stream_stream(f"/{SERVICE}/{method}")()
    dialler = Dialler(keyring or user_keyring(), method, None)
    await call.write(dialler.challenge())
    await call.write(dialler.proof(await asyncio.wait_for(call.read(), TIMEOUT_S)))
    return call
