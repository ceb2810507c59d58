"""What one end of a worker connection proves itself with, and whom it believes (issue 43)."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from ._handshake import Keyring
from ._peer import trusted_uids
from ._secret import SecretSource


@dataclasses.dataclass(frozen=True)
class Trust:
    """The keys one end holds (`_handshake`) and the local users it lets be the other end (`_peer`).

    Attributes:
        keyring: The secrets it proves itself with, and accepts proofs of.
        uids: The uids a peer on this host may run as (by default only this process's own).
    """

    keyring: Keyring
    uids: frozenset[int]

    @classmethod
    def of(cls, *fixed: str, source: SecretSource | None = None, peer_uids: Collection[int] = ()) -> Trust:
        """Trust in ``fixed`` secrets and ``source``'s, and in peers of this uid and ``peer_uids``."""
        return cls(Keyring(fixed, source), trusted_uids(peer_uids))
