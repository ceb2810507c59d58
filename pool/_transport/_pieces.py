"""Messages of any size over gRPC in pieces of bounded size, so that a gRPC message is never large (issue 43).

gRPC checks a message's announced length against
``grpc.max_receive_message_length`` before it buffers the message, and the
limit is one number for a whole server. Left unbounded, anyone who reaches
a worker's port could make it buffer a message of any size before the
handshake said who they are (a 400 MB request once took 1.28 GB). So every
gRPC message between a pool and a worker is at most `GRPC_MESSAGE_MAX_BYTES`,
and the Dispatch stream's own messages, which may be larger, cross as
pieces: a flag byte (0: the last piece of a message; 1: more follow), then
at most `PIECE_BYTES`. Large buffers already cross in chunks of their own
(`_chunks`), each of which fits one piece.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from ._framing import MESSAGE_MAX_BYTES, ProtocolError

PIECE_BYTES: Final[int] = (1 << 20) + (4 << 10)
"""The most bytes of a message one piece carries: a chunk of `_chunks.CHUNK_BYTES` and its frame fit in one."""

GRPC_MESSAGE_MAX_BYTES: Final[int] = PIECE_BYTES + 1
"""The largest gRPC message either end accepts (a piece and its flag): what an unauthenticated peer can make it buffer."""

_LAST: Final[bytes] = b"\0"
_MORE: Final[bytes] = b"\1"


def pieces(message: bytes) -> Iterator[bytes]:
    """``message`` as the pieces that carry it, in order."""
    if len(message) <= PIECE_BYTES:
        yield _LAST + message
        return
    view = memoryview(message)
    for at in range(0, len(message), PIECE_BYTES):
        yield (_MORE if at + PIECE_BYTES < len(message) else _LAST) + view[at : at + PIECE_BYTES]


class Assembler:
    """Puts the pieces of one stream's messages back together.

    Args:
        limit: The largest message accepted.
    """

    __slots__ = ("_limit", "_parts", "_size")

    def __init__(self, limit: int = MESSAGE_MAX_BYTES) -> None:
        self._limit = limit
        self._parts: list[memoryview] = []
        self._size = 0

    def add(self, piece: bytes) -> bytes | memoryview | None:
        """Take one piece; the whole message once its last piece came, else None.

        Raises:
            ProtocolError: an empty piece, a flag that is not ours, or a message over the limit.
        """
        if not piece or piece[0] > 1:
            raise ProtocolError("a gRPC message that is not a piece of ours")
        body = memoryview(piece)[1:]
        if piece[0] == 0 and not self._parts:
            if len(body) > self._limit:
                raise ProtocolError(f"a {len(body)}-byte message is over this stream's limit of {self._limit}")
            return body
        self._size += len(body)
        if self._size > self._limit:
            raise ProtocolError(f"a message of over {self._limit} bytes is over this stream's limit")
        self._parts.append(body)
        if piece[0] == 1:
            return None
        whole = b"".join(self._parts)
        self._parts, self._size = [], 0
        return whole
