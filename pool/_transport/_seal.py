"""What a store keeps, sealed with the user's secret and checked before a byte of it is unpickled (issue 51).

A job's payload is code (its routine, its arguments' pickles) and so is
its outcome (the pickled value or exception the caller's ``result()``
loads). A database role that may write the jobs table, but holds no
secret, must not be able to run anything: so everything a store keeps
that is later unpickled carries an HMAC under the user's secret, bound to
the row it belongs to and to the field, and the MAC is checked first::

    sealed = MAGIC + HMAC-SHA256(secret, "leakypool store seal/1" | field | len(row id) | row id | data) + data

- The row id (a job id, a worker uid) and the field (``payload``,
  ``outcome``, ``record``) are in the MAC, so no sealed blob can be moved to
  another job or another column.
- The check tries every secret held (a file may hold several: rotation works
  as it does for the handshake); there is no key id to fingerprint a secret.
- A blob without `MAGIC` was written by a release before sealing (or by
  somebody else): it is refused like a forged one, with a message that says
  so and names the migration step (``leakypool jobs STORE_URL sign``).

Sealing costs one HMAC-SHA256 over the blob (a few microseconds for a
no-op job); the secret never leaves the process.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Final

from .._errors import SerializationError

MAGIC: Final[bytes] = b"LPS1"
"""The first bytes of a sealed blob (a pickle starts with 0x80, a protobuf outcome with a field tag)."""

MAC_BYTES: Final[int] = 32
"""An HMAC-SHA256."""

_DOMAIN: Final[bytes] = b"leakypool store seal/1\0"
"""Keeps these MACs apart from every other use of the secret (the handshake's proofs)."""


class Seal:
    """Seals blobs for a store, and opens them only when their MAC checks under a secret held.

    Args:
        secrets: The secrets held now, preferred (sealing) first; called on
            every use, so a rotated secret file is followed.
        where: Where the secrets come from, for messages (never a secret).
    """

    __slots__ = ("_keys", "_secrets", "where")

    def __init__(self, secrets: Callable[[], tuple[str, ...]], where: str) -> None:
        self._secrets = secrets
        self._keys: dict[str, bytes] = {}
        self.where: str = where

    def _held(self) -> list[bytes]:
        held = []
        for secret in self._secrets():
            raw = self._keys.get(secret)
            if raw is None:
                raw = self._keys[secret] = secret.encode()
            held.append(raw)
        return held

    def seal(self, row: str, field: str, data: bytes) -> bytes:
        """``data`` sealed for ``field`` of row ``row`` under the preferred secret.

        Raises:
            SerializationError: this process holds no secret to seal with.
        """
        held = self._held()
        if not held:
            raise SerializationError(f"cannot seal the {field} of {row}: this process holds no secret ({self.where})")
        return MAGIC + _mac(held[0], row, field, data) + data

    def open(self, row: str, field: str, sealed: bytes) -> bytes:
        """The data inside ``sealed``, once its MAC checks for ``field`` of ``row``.

        Raises:
            SerializationError: it is not sealed, or sealed under no secret held,
                or for another row or field: naming the row and what to do (retrying
                cannot help: the row must be written again by a holder of the secret).
        """
        view = memoryview(sealed)
        if not sealed.startswith(MAGIC) or len(sealed) < len(MAGIC) + MAC_BYTES:
            raise SerializationError(
                f"the {field} of {row} is not sealed: an older release or a writer without the secret wrote it, "
                f"so it is not loaded (an older release's rows: `leakypool jobs STORE_URL sign`, docs/stores.md)"
            )
        mac = bytes(view[len(MAGIC) : len(MAGIC) + MAC_BYTES])
        data = bytes(view[len(MAGIC) + MAC_BYTES :])
        for raw in self._held():
            if hmac.compare_digest(mac, _mac(raw, row, field, data)):
                return data
        raise SerializationError(
            f"the {field} of {row} was not written by a holder of this process's secret ({self.where}): "
            f"it is not loaded; processes that share a store must share a secret file (docs/stores.md)"
        )

    def mac(self, row: str, field: str, data: bytes) -> bytes:
        """The MAC `seal` puts before ``data`` (for a text column that keeps it beside the data)."""
        return self.seal(row, field, data)[len(MAGIC) : len(MAGIC) + MAC_BYTES]

    def checks(self, row: str, field: str, data: bytes, mac: bytes) -> bool:
        """Whether ``mac`` is ``data``'s for ``field`` of ``row`` under a secret held."""
        return any(hmac.compare_digest(mac, _mac(raw, row, field, data)) for raw in self._held())

    def verifies(self, row: str, field: str, sealed: bytes) -> bool:
        """Whether `open` would return (for checks that load nothing)."""
        try:
            self.open(row, field, sealed)
        except SerializationError:
            return False
        return True

    def __repr__(self) -> str:
        return f"<Seal {self.where}>"


def is_sealed(blob: bytes) -> bool:
    """Whether ``blob`` has a seal's form (whatever its MAC)."""
    return blob.startswith(MAGIC) and len(blob) >= len(MAGIC) + MAC_BYTES


def _mac(key: bytes, row: str, field: str, data: bytes) -> bytes:
    # Lengths, not separators, delimit the parts: a row id may hold any character.
    head = field.encode() + b"\0"
    name = row.encode()
    # One C call (hmac.digest: OpenSSL's one-shot HMAC), not an hmac.HMAC object: the jobs path seals and checks
    # two or three fields a job. The same MAC as updating one object with the parts in turn.
    return hmac.digest(key, b"".join((_DOMAIN, head, len(name).to_bytes(4, "big"), name, data)), "sha256")
