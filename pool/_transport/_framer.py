"""The one framing of a leakypool stream: a 4-byte big-endian length, then that many bytes.

Sans-I/O: bytes in, messages out, no socket and no loop. Every reader of a
framed stream splits with a `Framer` (the stream protocol, `_framing.MessageStream`;
the worker's gate before a dialler proved itself; a State request read off
a socket; a dialler's handshake reads, with `message_size`), and every
writer prefixes with `framed` or `prefix`. The length is checked against a
limit before a byte of the message is kept: a peer that announces more than
its step allows is refused at once, not buffered.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

PREFIX_BYTES: Final[int] = 4
"""The length in front of every message."""

_LENGTH: Final[struct.Struct] = struct.Struct(">I")


class ProtocolError(ValueError):
    """The peer sent bytes that are not this protocol (a bad hello, an oversized length).

    Not a `ConnectionError`: a peer that speaks something else is a fault to
    report (a worker gets evicted for it), not a peer that merely went away.
    """


def prefix(size: int) -> bytes:
    """The length of a ``size``-byte message, to write in front of it (a large message: two buffers, gathered)."""
    return _LENGTH.pack(size)


def framed(message: bytes) -> bytes:
    """``message`` with its length in front, as one buffer (a small message: one write)."""
    return _LENGTH.pack(len(message)) + message


def message_size(header: bytes, limit: int) -> int:
    """The size a 4-byte ``header`` announces.

    Raises:
        ProtocolError: it is over ``limit``.
    """
    (size,) = _LENGTH.unpack(header)
    if size > limit:
        raise ProtocolError(f"a {size}-byte message where at most {limit} were expected")
    return size


class Framer:
    """Whole messages out of a byte stream that arrives in pieces of any size.

    Two ways to read, for two kinds of reader: `split` hands on every whole
    message at once, up to `limit` each (a stream in full flow, the hot
    path); `hold` and `next` take one message at a time, each step with a
    limit of its own (a handshake, whose messages are small until the peer
    proved itself), and `rest` gives back what was held and not taken.

    Args:
        limit: The largest message `split` accepts (raised once a peer proved itself).
    """

    __slots__ = ("_pending", "_pending_bytes", "_wanted", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: list[bytes] = []  # the start of a message still arriving
        self._pending_bytes = 0
        self._wanted = 0  # bytes the pending part must reach before it is worth parsing

    @property
    def held(self) -> int:
        """Bytes received and not yet handed on (the start of a message, or messages not yet taken)."""
        return self._pending_bytes

    def split(self, data: bytes, deliver: Callable[[memoryview], object]) -> bool:
        """Hand every whole message in what was pending and ``data`` to ``deliver``, in order; keep the rest.

        Returns True when a message that took more than one piece arrived
        whole (it was in transfer until now). A message is a view of the
        received bytes: no copy.

        Raises:
            ProtocolError: a message announces more than `limit` (those before it were delivered).
        """
        completed = False
        if self._pending:
            self._pending.append(data)
            self._pending_bytes += len(data)
            if self._pending_bytes < self._wanted:
                return False
            data = b"".join(self._pending)
            self._pending, self._pending_bytes = [], 0
            completed = True
        view = memoryview(data)
        end = len(data)
        at = 0
        limit = self.limit
        while end - at >= PREFIX_BYTES:
            (size,) = _LENGTH.unpack_from(data, at)
            if size > limit:
                raise ProtocolError(f"a {size}-byte message is over this stream's limit of {limit}")
            if end - at - PREFIX_BYTES < size:
                break
            deliver(view[at + PREFIX_BYTES : at + PREFIX_BYTES + size])
            at += PREFIX_BYTES + size
        if at < end:
            rest = data[at:]
            self._pending, self._pending_bytes = [rest], len(rest)
            self._wanted = PREFIX_BYTES + _LENGTH.unpack_from(rest)[0] if len(rest) >= PREFIX_BYTES else PREFIX_BYTES
        return completed

    def hold(self, data: bytes) -> None:
        """Keep ``data`` for `next`, after what is held."""
        if data:
            self._pending.append(data)
            self._pending_bytes += len(data)

    def unread(self, data: bytes) -> None:
        """Put ``data`` back in front of what is held (read ahead and not consumed)."""
        if data:
            self._pending.insert(0, data)
            self._pending_bytes += len(data)

    def next(self, limit: int) -> bytes | None:
        """The next whole message held, of at most ``limit`` bytes; None until it has all arrived.

        Raises:
            ProtocolError: it announces more than ``limit``.
        """
        if self._pending_bytes < PREFIX_BYTES:
            return None
        data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
        self._pending = [data]
        size = message_size(data[:PREFIX_BYTES], limit)
        if len(data) < PREFIX_BYTES + size:
            return None
        message, rest = data[PREFIX_BYTES : PREFIX_BYTES + size], data[PREFIX_BYTES + size :]
        self._pending, self._pending_bytes = ([rest] if rest else []), len(rest)
        return bytes(message)

    def rest(self) -> bytes:
        """Everything held, as it came (no message taken out), and forget it."""
        data = b"".join(self._pending)
        self._pending, self._pending_bytes, self._wanted = [], 0, 0
        return data
