"""The door of a worker's unix socket: who may come in, before anything they send is read (issue 43).

Every connection starts with its hello (the method), then the handshake
(`pool._transport._handshake`). Until the dialler has proven itself, the
`Gate` reads only messages of a handshake's size, and holds at most
`HOLD_BYTES` of what follows (the dialler's first real messages, sent at
once after its proof): past that, reading stops and the rest waits in the
kernel. Only then does the connection become a `MessageStream`.

    accept ── SO_PEERCRED: a trusted uid? ── Gate.feed: hello, challenge -> answer, proof ──> MessageStream

The gate is sans-I/O, so the two readers of a worker's socket share it:
the event loop (`Doorman`, an asyncio protocol), and the watch thread that
answers State while a routine holds the loop (`_unix_server`), which hands
a half-done gate over to the loop when the dialler is slow.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Collection
from typing import Final, cast

from .._transport import (
    HANDSHAKE_MAX_BYTES,
    HELLO_MAX_BYTES,
    MESSAGE_MAX_BYTES,
    TIMEOUT_S,
    Framer,
    Keyring,
    MessageStream,
    ProtocolError,
    Refused,
    Responder,
    check_unix,
    framed,
    method_of,
)

_log = logging.getLogger("leakypool.worker")

HOLD_BYTES: Final[int] = 64 << 10
"""Bytes past the handshake held (not parsed) until the dialler proved itself; beyond them reading pauses."""


class Gate:
    """The hello and the handshake of one connection, fed its bytes as they come.

    Args:
        keyring: What this worker proves itself with.
        uid: This worker's uid.
    """

    def __init__(self, keyring: Keyring, uid: uuid.UUID) -> None:
        self._keyring = keyring
        self._uid = uid
        self._framer = Framer(HELLO_MAX_BYTES)  # one message at a time, each with its step's limit
        self._responder: Responder | None = None
        self.method: str | None = None
        self._answered = False  # the challenge was answered: the proof comes next
        self.open = False  # the dialler proved itself

    @property
    def held(self) -> int:
        """Bytes received and not yet consumed."""
        return self._framer.held

    def feed(self, data: bytes) -> list[bytes]:
        """Take ``data``; the messages to send back, framed, in order.

        Raises:
            ProtocolError: not our protocol (a bad hello, an oversized message).
            Refused: the dialler failed the handshake (``reply``: what to tell it first).
        """
        self._framer.hold(data)
        out: list[bytes] = []
        while not self.open:
            try:
                message = self._framer.next(HELLO_MAX_BYTES if self.method is None else HANDSHAKE_MAX_BYTES)
            except ProtocolError as exc:
                raise ProtocolError(f"{exc}, before the handshake ended") from None
            if message is None:
                break
            if self.method is None:
                self.method = method_of(message)
                if self.method is None:
                    raise ProtocolError("not a leakypool hello")
                self._responder = Responder(self._keyring, self.method, self._uid)
            elif not self._answered:
                self._answered = True
                out.append(framed(self._responder_().answer(message)))
            else:
                self._responder_().check(message)
                self.open = True
        return out

    def _responder_(self) -> Responder:
        assert self._responder is not None  # noqa: S101 - set with the method
        return self._responder

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of what is held (read past the gate by the watch thread, not consumed)."""
        self._framer.unread(data)

    def rest(self) -> bytes:
        """What came after the proof (the dialler's first messages), handed to the stream."""
        return self._framer.rest()


class Doorman(asyncio.Protocol):
    """A connection on the loop until its gate opens; then it becomes a `MessageStream` and goes to ``admit``.

    Args:
        gate: The connection's gate (a new one, or one the watch thread began).
        trusted: The uids let in.
        admit: Gets the method and the stream once the dialler proved itself.
        done: Called once this doorman is finished (admitted or turned away).
    """

    def __init__(
        self,
        gate: Gate,
        trusted: Collection[int],
        admit: Callable[[str, MessageStream], None],
        done: Callable[[Doorman], None],
    ) -> None:
        self._gate = gate
        self._trusted = trusted
        self._admit = admit
        self._done = done
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)
        try:
            check_unix(transport.get_extra_info("socket"), self._trusted, "the dialler")
        except Refused as exc:
            self._turn_away(exc)
            return
        self._timer = asyncio.get_running_loop().call_later(
            TIMEOUT_S, self._turn_away, TimeoutError("too slow to prove itself")
        )
        if self._gate.open:
            self._hand_over()  # the watch thread finished the handshake

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            for message in self._gate.feed(data):
                transport.write(message)
        except Refused as exc:
            if exc.reply:
                transport.write(framed(exc.reply))
            self._turn_away(exc, abort=False)
            return
        except ProtocolError as exc:
            self._turn_away(exc)
            return
        if self._gate.open:
            self._hand_over()
        elif self._gate.held > HOLD_BYTES and not self._paused:
            self._paused = True
            transport.pause_reading()  # the rest waits in the kernel until the dialler proved itself

    def eof_received(self) -> bool:
        self._finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish()

    def _hand_over(self) -> None:
        transport = self.transport
        assert transport is not None  # noqa: S101 - called once connected
        self._finish()
        stream = MessageStream(MESSAGE_MAX_BYTES, received=self._gate.rest())
        transport.set_protocol(stream)
        stream.connection_made(transport)
        if self._paused:
            transport.resume_reading()
        self._admit(cast("str", self._gate.method), stream)

    def _turn_away(self, why: BaseException, *, abort: bool = True) -> None:
        _log.warning("turned away a connection to the unix socket: %s", why)
        self._finish()
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()  # what was written (a refusal) still leaves

    def _finish(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._done(self)

    def close(self) -> None:
        """Drop the connection now (the worker is closing)."""
        if self.transport is not None:
            self.transport.abort()
