"""What one end of a worker connection proves itself with, and whom it believes (issue 43)."""

from __future__ import annotations

from collections.abc import Collection

from ._handshake import Keyring
from ._peer import trusted_uids
from ._secret import SecretSource


class Trust:
    """The keys one end holds (`_handshake`) and the local users it lets be the other end (`_peer`).

    (A plain class, not a dataclass: both processes import it at start, where every millisecond shows.)

    Attributes:
        keyring: The secrets it proves itself with, and accepts proofs of.
        uids: The uids a peer on this host may run as (by default only this process's own).
    """

    __slots__ = ("keyring", "uids")

    def __init__(self, keyring: Keyring, uids: frozenset[int]) -> None:
        self.keyring = keyring
        self.uids = uids

    def own(self) -> Trust:
        """The same trust with the fixed keys only: what a pool's own spawned workers hold (no file to read)."""
        return Trust(self.keyring.fixed_only(), self.uids)

    def __repr__(self) -> str:
        return f"<Trust {self.keyring.describe()}; uids {sorted(self.uids)}>"

    @classmethod
    def of(cls, *fixed: str, source: SecretSource | None = None, peer_uids: Collection[int] = ()) -> Trust:
        """Trust in ``fixed`` secrets and ``source``'s, and in peers of this uid and ``peer_uids``."""
        return cls(Keyring(fixed, source), trusted_uids(peer_uids))
