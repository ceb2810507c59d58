"""Integrity after the handshake where TLS gives none: every message of a stream sealed under that stream's keys.

The handshake (`_handshake`) proves who is at each end, but by itself not
that what follows comes from them: a relay on the path (placed by a
rewritten registry row, say) could pass the handshake through and then read
and alter the messages. On a unix socket and on loopback each end checks the
other's uid, and off the host TLS protects the stream; a pool that dials a
worker off loopback without TLS (``insecure=True``) asks, in its proof, for
every message to be sealed instead. Both ends then derive two keys from the
secret the handshake used and both of its fresh nonces, one per direction,
and each message carries a tag::

    key (pool -> worker)  = HMAC-SHA256(secret, "leakypool/1 seal pool"   method nonce_p nonce_w key_id uid)
    key (worker -> pool)  = HMAC-SHA256(secret, "leakypool/1 seal worker" method nonce_p nonce_w key_id uid)
    message on the wire   = message, then its tag:
    tag (under 64 KiB)    = BLAKE2b-128(message; key, salt = its number in that direction)
    tag (64 KiB and more) = HMAC-SHA256(key, its number | message), its first 16 bytes

A relay without the secret cannot make a tag, so it cannot alter, insert,
drop, reorder or replay a message (the number is bound in), nor move one
from another stream (the nonces are) or bounce one back (the direction is):
the receiver ends the stream instead. It can still read them: what must not
be read belongs behind TLS (docs/lan-security.md). Two MACs, chosen by the
message's length (which both ends know): keyed BLAKE2b takes a key and a
salt natively (one C call, ~0.7 µs for a small message, against ~2 µs for an
HMAC), and SHA-256 runs at about twice BLAKE2b's speed on a CPU with SHA
instructions (~1.9 against ~1 GB/s here), which is what a large value pays.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final

from ._framer import ProtocolError

TAG_BYTES: Final[int] = 16
"""The tag after each sealed message."""

LARGE_BYTES: Final[int] = 64 << 10
"""From this length a message's tag is an HMAC-SHA256 (faster per byte), below it a keyed BLAKE2b (less to set up)."""


class StreamSeal:
    """The seals of one stream, as one end sees it: what it sends, what it receives, each counted.

    Args:
        sending: The key of this end's direction.
        receiving: The key of the other end's.
    """

    __slots__ = ("_received", "_receiving", "_sending", "_sent")

    def __init__(self, sending: bytes, receiving: bytes) -> None:
        self._sending = sending
        self._receiving = receiving
        self._sent = 0
        self._received = 0

    def seal(self, message: bytes) -> bytes:
        """``message`` with its tag (the next number in this direction)."""
        number = self._sent
        self._sent = number + 1
        return message + _tag(self._sending, number, message)

    def open(self, sealed: bytes | memoryview) -> memoryview:
        """The message inside ``sealed``, once its tag proves it is the next one the other end sent.

        Raises:
            ProtocolError: it is not (altered, out of order, or not sealed at all): the stream must end.
        """
        view = memoryview(sealed)
        if len(view) < TAG_BYTES:
            raise ProtocolError("a message without its seal on a sealed stream")
        message, tag = view[:-TAG_BYTES], view[-TAG_BYTES:]
        number = self._received
        if not hmac.compare_digest(tag, _tag(self._receiving, number, message)):
            raise ProtocolError(
                f"message {number} of this stream does not carry its seal: altered, moved or replayed on the way "
                "(a relay between the pool and the worker?); the stream ends (docs/lan-security.md)"
            )
        self._received = number + 1
        return message


def _tag(key: bytes, number: int, message: bytes | memoryview) -> bytes:
    salt = number.to_bytes(16, "big")
    if len(message) < LARGE_BYTES:
        return hashlib.blake2b(message, key=key, salt=salt, digest_size=TAG_BYTES).digest()
    mac = hmac.new(key, salt, "sha256")
    mac.update(message)  # (no copy of a large message)
    return mac.digest()[:TAG_BYTES]


def stream_keys(secret: bytes, transcript: bytes) -> tuple[bytes, bytes]:
    """The two keys of a stream, (pool -> worker, worker -> pool), from the handshake's secret and transcript."""
    return (
        hmac.digest(secret, b"leakypool/1 seal pool\0" + transcript, "sha256"),
        hmac.digest(secret, b"leakypool/1 seal worker\0" + transcript, "sha256"),
    )
