"""Mutual authentication at the start of every connection between a pool and a worker (issue 43).

A worker runs what it is sent and a pool unpickles what a worker returns,
so neither reads the other's first real message before both proved they
hold a secret in common (`_secret`). As ``multiprocessing.connection``
does, each end answers a fresh challenge of the other's with an HMAC; the
secret never crosses the wire, not even to a genuine peer::

    dialler (the pool)                                worker
    Challenge  "LPC2" nonce_p, ids of its keys  ──>   picks the first of its keys the pool holds too
                                                <──   Answer "LPA1" nonce_w, key id, uid, proof_w
    checks proof_w (and that the uid is the one           (or Refusal "LPR1" why, then it hangs up)
    it dialled), then, and only then:
    Proof      "LPP1" proof_p                   ──>   checks proof_p; until then it reads nothing else
            or "LPP2" proof_p (sealed: every message after it carries a tag, `_stream_seal`)
    (the method's own messages follow at once)

    key id  = HMAC-SHA256(key, "leakypool/1 key id" nonce_p)[:8]       (salted by the challenge's nonce)
    proof_w = HMAC-SHA256(key, "leakypool/1 worker" method nonce_p nonce_w key_id uid)
    proof_p = HMAC-SHA256(key, "leakypool/1 pool"   method nonce_p nonce_w key_id uid)
              (sealed: "leakypool/1 pool sealed"; a relay cannot turn one kind into the other)

A key's id is salted with the pool's fresh nonce (issue 51): an id that
were a fixed function of the secret would let anyone who saw one
challenge test guesses at a human-chosen secret offline. A worker still
answers the older ``LPC1`` challenge (fixed ids) of a pool of an earlier
release, so workers can be upgraded before pools; a pool sends only ``LPC2``.

Both nonces are fresh, so a proof cannot be replayed; the two directions
are labelled apart, so a worker's proof cannot be reflected back as a
pool's; the method is bound in, so a relay cannot turn a State into a Stop;
the worker's uid is bound in, so a worker cannot answer for another (a
record that moves a worker must lead to one that proves that uid). Each
message is at most `HANDSHAKE_MAX_BYTES`: the worker reads nothing larger
before the pool proved itself. A relay that merely passes the bytes on
would pass too; on this host each end also checks the other's uid
(`_peer`), and off the host TLS does, or, without TLS, the seal on every
message that the pool's proof asks for (`_stream_seal`).

This module is sans-I/O: the transports (`_unix_channel`, `_grpc_channel`,
the worker's servers) move its messages.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from collections.abc import Sequence
from typing import Final, NamedTuple

from ._secret import SecretSource
from ._stream_seal import StreamSeal, stream_keys

NONCE_BYTES: Final[int] = 32
"""Random bytes in each challenge."""

KEY_ID_BYTES: Final[int] = 8
"""Bytes of a key's id (an HMAC of the challenge's nonce: it says which key, and nothing of it)."""

MAX_KEYS: Final[int] = 4
"""Keys one challenge may offer (a current secret and one being rotated in or out, and the spawn key)."""

HANDSHAKE_MAX_BYTES: Final[int] = 256
"""The largest handshake message: what a peer may make the other read before it proved itself."""

TIMEOUT_S: Final[float] = 10.0
"""How long a handshake may take, on either side, before the connection is dropped."""

REASON_MAX_BYTES: Final[int] = 200
"""The longest reason a refusal carries."""

_CHALLENGE: Final[bytes] = b"LPC2"
_CHALLENGE_FIXED_IDS: Final[bytes] = b"LPC1"
"""An earlier release's challenge: the same, with key ids that do not depend on the nonce."""
_ANSWER: Final[bytes] = b"LPA1"
_REFUSAL: Final[bytes] = b"LPR1"
_PROOF: Final[bytes] = b"LPP1"
_PROOF_SEALED: Final[bytes] = b"LPP2"
"""A proof that asks for every message after it to be sealed (`_stream_seal`)."""
_DIGEST: Final[int] = 32
_ANSWER_BYTES: Final[int] = len(_ANSWER) + NONCE_BYTES + KEY_ID_BYTES + 16 + _DIGEST


class Refused(ConnectionError):
    """The other end did not prove itself (or refused this one): the connection ends, nothing else is read.

    A hard fault on a worker's stream (``UNAUTHENTICATED``: the pool evicts
    it); a retry cannot succeed until the secrets are put right.

    Attributes:
        reply: What to send the peer before hanging up (a refusal), or b"".
    """

    code: Final = "UNAUTHENTICATED"

    def __init__(self, message: str, reply: bytes = b"") -> None:
        super().__init__(message)
        self.reply = reply


class Key(NamedTuple):
    """One secret, as the handshake uses it."""

    id: bytes
    secret: bytes


def key(secret: str) -> Key:
    """The `Key` of ``secret`` (its id unsalted: what an earlier release's challenge names it by)."""
    raw = secret.encode()
    return Key(hmac.new(raw, b"leakypool/1 key id", hashlib.sha256).digest()[:KEY_ID_BYTES], raw)


def salted(k: Key, nonce: bytes) -> Key:
    """``k`` with its id for the challenge of ``nonce`` (a different id in every handshake)."""
    return Key(hmac.new(k.secret, b"leakypool/1 key id" + nonce, hashlib.sha256).digest()[:KEY_ID_BYTES], k.secret)


class Keyring:
    """The keys one end proves itself with: fixed ones (a pool's spawn key) and a `SecretSource`'s.

    Args:
        fixed: Secrets held for good (preferred first).
        source: Where the others come from (re-read as it changes), or None.
        create: Make the source's default file if it is missing (a worker's own secret).
    """

    def __init__(self, fixed: Sequence[str] = (), source: SecretSource | None = None, *, create: bool = False) -> None:
        self._fixed = tuple(key(s) for s in fixed)
        self._source = source
        self._create = create
        self._cache: dict[str, Key] = {}

    def fixed_only(self) -> Keyring:
        """A keyring of the fixed keys alone (for the workers a pool spawned, which hold nothing else)."""
        only = Keyring()
        only._fixed = self._fixed  # (the same class: the keys already derived)
        return only

    def held(self) -> tuple[Key, ...]:
        """The keys held now (at most `MAX_KEYS`)."""
        found = list(self._fixed)
        if self._source is not None:
            for secret in self._source.secrets(create=self._create):
                k = self._cache.get(secret)
                if k is None:
                    k = self._cache[secret] = key(secret)
                found.append(k)
        return tuple(dict.fromkeys(found))[:MAX_KEYS]

    def describe(self) -> str:
        """Where the keys come from, for messages."""
        parts = ["a key of its own"] if self._fixed else []
        if self._source is not None:
            parts.append(self._source.describe())
        return " and ".join(parts) or "no secret"

    def __repr__(self) -> str:
        return f"<Keyring {self.describe()}>"


def _transcript(k: Key, method: str, nonce_p: bytes, nonce_w: bytes, uid: bytes) -> bytes:
    return method.encode() + b"\0" + nonce_p + nonce_w + k.id + uid


def _proof(k: Key, label: bytes, method: str, nonce_p: bytes, nonce_w: bytes, uid: bytes) -> bytes:
    message = b"leakypool/1 " + label + b"\0" + _transcript(k, method, nonce_p, nonce_w, uid)
    return hmac.new(k.secret, message, hashlib.sha256).digest()


class Dialler:
    """The pool's side of one handshake.

    Args:
        keyring: What it proves itself with.
        method: What the connection is for (``Dispatch``, ``State``, ``Stop``, ``Buffers``).
        uid: The worker it means to reach; None takes the uid the worker proves (a probe).

    Raises:
        Refused: it holds no key at all.
    """

    def __init__(self, keyring: Keyring, method: str, uid: uuid.UUID | None) -> None:
        self._nonce = secrets.token_bytes(NONCE_BYTES)
        self._keys = {k.id: k for k in (salted(k, self._nonce) for k in keyring.held())}
        if not self._keys:
            raise Refused(f"this pool holds no secret to prove itself with ({keyring.describe()})")
        self._method = method
        self.uid = uid
        self.seal: StreamSeal | None = None  # set by `proof` when it asks for sealed messages

    def challenge(self) -> bytes:
        """The first message."""
        return _CHALLENGE + self._nonce + bytes([len(self._keys)]) + b"".join(self._keys)

    def proof(self, answer: bytes | memoryview, *, sealed: bool = False) -> bytes:
        """Check the worker's answer; the proof to send back (then the connection is the pool's to use).

        ``sealed``: ask for every message after the proof to be sealed, both ways (`seal` then seals and
        opens them): a stream off loopback without TLS.

        Raises:
            Refused: it refused, or its proof, its key or its uid is not what was asked.
        """
        answer = bytes(answer)
        if answer.startswith(_REFUSAL):
            raise Refused(f"it refused this pool: {printable(answer[len(_REFUSAL) :])}")
        if len(answer) != _ANSWER_BYTES or not answer.startswith(_ANSWER):
            raise Refused(
                f"it did not answer the challenge (a {len(answer)}-byte reply that is not a leakypool worker's)"
            )
        at = len(_ANSWER)
        nonce_w, at = answer[at : at + NONCE_BYTES], at + NONCE_BYTES
        key_id, at = answer[at : at + KEY_ID_BYTES], at + KEY_ID_BYTES
        uid, proof_w = answer[at : at + 16], answer[at + 16 :]
        k = self._keys.get(key_id)
        if k is None:
            raise Refused("it answered with a key this pool did not offer")
        if not hmac.compare_digest(proof_w, _proof(k, b"worker", self._method, self._nonce, nonce_w, uid)):
            raise Refused("it could not prove it holds the secret (a worker that is not who its record says)")
        proven = uuid.UUID(bytes=uid)
        if self.uid is not None and proven != self.uid:
            raise Refused(f"it proved to be worker {proven}, not {self.uid} (a record that points elsewhere)")
        self.uid = proven
        if not sealed:
            return _PROOF + _proof(k, b"pool", self._method, self._nonce, nonce_w, uid)
        to_worker, to_pool = stream_keys(k.secret, _transcript(k, self._method, self._nonce, nonce_w, uid))
        self.seal = StreamSeal(sending=to_worker, receiving=to_pool)
        return _PROOF_SEALED + _proof(k, b"pool sealed", self._method, self._nonce, nonce_w, uid)


class Responder:
    """The worker's side of one handshake.

    Args:
        keyring: What it proves itself with.
        method: What the peer asked for.
        uid: This worker's uid.
    """

    def __init__(self, keyring: Keyring, method: str, uid: uuid.UUID) -> None:
        self._keyring = keyring
        self._method = method
        self._uid = uid.bytes
        self._pending: tuple[Key, bytes, bytes] | None = None  # (key, nonce_p, nonce_w) once answered
        self.seal: StreamSeal | None = None  # set by `check` when the pool's proof asks for sealed messages

    def answer(self, challenge: bytes | memoryview) -> bytes:
        """The answer to the pool's challenge.

        Raises:
            Refused: it is not a challenge, or offers no key this worker
                holds (its ``reply`` tells the peer so).
        """
        challenge = bytes(challenge)
        head = len(_CHALLENGE) + NONCE_BYTES
        count = challenge[head] if len(challenge) > head else 0
        if (
            not challenge.startswith((_CHALLENGE, _CHALLENGE_FIXED_IDS))
            or not 0 < count <= MAX_KEYS
            or len(challenge) != head + 1 + count * KEY_ID_BYTES
        ):
            raise Refused("the peer did not open with a challenge", refusal("not a leakypool challenge"))
        offered = {challenge[at : at + KEY_ID_BYTES] for at in range(head + 1, len(challenge), KEY_ID_BYTES)}
        held = self._keyring.held()
        if challenge.startswith(_CHALLENGE):
            held = tuple(salted(k, challenge[len(_CHALLENGE) : head]) for k in held)
        chosen = next((k for k in held if k.id in offered), None)
        if chosen is None:
            raise Refused(
                "the peer holds no secret in common with this worker",
                refusal("no secret in common (give the pool this worker's secret: see docs/lan-security.md)"),
            )
        nonce_p, nonce_w = challenge[len(_CHALLENGE) : head], secrets.token_bytes(NONCE_BYTES)
        self._pending = (chosen, nonce_p, nonce_w)
        proof_w = _proof(chosen, b"worker", self._method, nonce_p, nonce_w, self._uid)
        return _ANSWER + nonce_w + chosen.id + self._uid + proof_w

    def check(self, proof: bytes | memoryview) -> None:
        """Check the pool's proof: from here on its messages may be read (through `seal`, if it asked for one).

        Raises:
            Refused: it is not the proof of a holder of the key.
        """
        if self._pending is None:
            raise Refused("a proof before the challenge")
        k, nonce_p, nonce_w = self._pending
        self._pending = None
        proof = bytes(proof)
        sealed = proof.startswith(_PROOF_SEALED)
        expected = _proof(k, b"pool sealed" if sealed else b"pool", self._method, nonce_p, nonce_w, self._uid)
        if not (proof.startswith((_PROOF, _PROOF_SEALED)) and hmac.compare_digest(proof[len(_PROOF) :], expected)):
            raise Refused("the peer could not prove it holds the secret")
        if sealed:
            to_worker, to_pool = stream_keys(k.secret, _transcript(k, self._method, nonce_p, nonce_w, self._uid))
            self.seal = StreamSeal(sending=to_pool, receiving=to_worker)


def refusal(why: str) -> bytes:
    """A refusal message saying ``why``."""
    return _REFUSAL + why.encode()[:REASON_MAX_BYTES]


def printable(sent: bytes, limit: int = REASON_MAX_BYTES) -> str:
    """What a peer sent, cut to ``limit`` bytes and escaped (no newline, no control character) to go in a log."""
    text = sent[:limit].decode("utf-8", "replace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
