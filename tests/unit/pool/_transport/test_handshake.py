"""Tests for pool._transport._handshake: both ends prove the secret; proofs cannot be replayed, reflected or moved."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._transport._handshake import HANDSHAKE_MAX_BYTES, MAX_KEYS, Dialler, Keyring, Refused, Responder, key

WORKER = uuid.UUID(int=7)


def shake(pool_keys, worker_keys, *, method="Dispatch", expect=WORKER, uid=WORKER, answer_method=None):
    """One whole handshake; returns the dialler once both checked each other."""
    dialler = Dialler(Keyring(pool_keys), method, expect)
    responder = Responder(Keyring(worker_keys), answer_method or method, uid)
    proof = dialler.proof(responder.answer(dialler.challenge()))
    responder.check(proof)
    return dialler


class TestHandshake:
    def test_both_ends_should_prove_a_secret_they_share(self):
        """Test that a pool and a worker holding one secret get through, and the pool learns the worker's uid."""
        assert shake(["s"], ["s"], expect=None).uid == WORKER

    def test_key_ids_should_differ_in_every_challenge_and_name_no_fixed_function_of_the_secret(self):
        """Test issue 51 finding 9: a challenge's key ids are salted by its nonce, so none is a fingerprint of
        the secret to test guesses against offline; both ends still agree on the key."""
        first, second = (Dialler(Keyring(["s"]), "Dispatch", WORKER).challenge() for _ in range(2))
        ids = [c[-8:] for c in (first, second)]
        assert ids[0] != ids[1] and key("s").id not in ids
        assert shake(["s"], ["s"]).uid == WORKER

    def test_a_worker_should_answer_an_earlier_releases_challenge(self):
        """Test that a worker answers the LPC1 challenge (fixed key ids) of a pool of the release before."""
        responder = Responder(Keyring(["s"]), "Dispatch", WORKER)
        legacy = b"LPC1" + bytes(32) + b"\x01" + key("s").id
        assert responder.answer(legacy).startswith(b"LPA1")

    def test_a_refusal_should_reach_the_log_escaped_and_cut(self):
        """Test that a peer's refusal text cannot forge log lines: control characters escaped, length bounded."""
        dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
        with pytest.raises(Refused) as refused:
            dialler.proof(b"LPR1" + b"line one\n2026-12-07 ERROR forged\x1b[31m" + b"x" * 1000)
        text = str(refused.value)
        assert "\n" not in text and "\x1b" not in text and "\\n" in text and len(text) < 300

    def test_a_worker_without_the_secret_should_be_refused_with_a_reason(self):
        """Test that a worker holding no secret in common refuses, and says why, so the pool can log it."""
        dialler = Dialler(Keyring(["mine"]), "Dispatch", WORKER)
        responder = Responder(Keyring(["theirs"]), "Dispatch", WORKER)
        with pytest.raises(Refused) as refused:
            responder.answer(dialler.challenge())
        with pytest.raises(Refused, match="no secret in common"):
            dialler.proof(refused.value.reply)

    def test_an_impostor_should_not_pass_by_naming_a_key_it_does_not_hold(self):
        """Test that an answer carrying the right key id but a made-up proof is refused (a planted worker)."""
        dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
        honest = Responder(Keyring(["s"]), "Dispatch", WORKER).answer(dialler.challenge())
        forged = honest[:-32] + bytes(32)
        with pytest.raises(Refused, match="could not prove"):
            dialler.proof(forged)

    def test_a_worker_proof_should_not_be_reflected_as_a_pool_proof(self):
        """Test that the worker's own proof, sent back to it, does not pass for the pool's (directions differ)."""
        dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
        responder = Responder(Keyring(["s"]), "Dispatch", WORKER)
        answer = responder.answer(dialler.challenge())
        with pytest.raises(Refused):
            responder.check(b"LPP1" + answer[-32:])

    def test_a_proof_should_not_be_replayed_on_another_connection(self):
        """Test that a recorded pool proof is worthless against a fresh challenge (both nonces are fresh)."""
        dialler = Dialler(Keyring(["s"]), "Dispatch", WORKER)
        first = Responder(Keyring(["s"]), "Dispatch", WORKER)
        proof = dialler.proof(first.answer(dialler.challenge()))
        second = Responder(Keyring(["s"]), "Dispatch", WORKER)
        second.answer(Dialler(Keyring(["s"]), "Dispatch", WORKER).challenge())
        with pytest.raises(Refused):
            second.check(proof)

    def test_a_worker_should_not_answer_for_another_uid(self):
        """Test that a record naming one uid and leading to another genuine worker is refused (no "moved to")."""
        with pytest.raises(Refused, match="not 00000000"):
            shake(["s"], ["s"], expect=uuid.UUID(int=1), uid=WORKER)

    def test_a_proof_for_one_method_should_not_serve_another(self):
        """Test that a relay cannot turn a State into a Stop: the method is bound into both proofs."""
        with pytest.raises(Refused):
            shake(["s"], ["s"], method="State", answer_method="Stop")

    def test_a_rotation_should_work_while_either_end_holds_old_and_new(self):
        """Test that a pool with the new secret only and a worker with both (old first) agree on the new one."""
        assert shake(["new"], ["old", "new"]).uid == WORKER
        assert shake(["old", "new"], ["new"]).uid == WORKER

    def test_a_pool_without_any_secret_should_refuse_to_dial(self):
        with pytest.raises(Refused, match="holds no secret"):
            Dialler(Keyring(), "Dispatch", WORKER)

    def test_a_keyring_should_offer_at_most_max_keys_without_repeats(self):
        secrets = [f"s{i}" for i in range(MAX_KEYS + 3)]
        held = Keyring([*secrets, "s0"]).held()
        assert len(held) == MAX_KEYS and held[0] == key("s0")

    def test_every_message_should_fit_the_limit(self):
        dialler = Dialler(Keyring([f"s{i}" for i in range(MAX_KEYS)]), "Dispatch", WORKER)
        responder = Responder(Keyring(["s3"]), "Dispatch", WORKER)
        challenge = dialler.challenge()
        answer = responder.answer(challenge)
        assert max(len(challenge), len(answer), len(dialler.proof(answer))) <= HANDSHAKE_MAX_BYTES

    @given(garbage=st.binary(max_size=2 * HANDSHAKE_MAX_BYTES))
    def test_garbage_should_only_ever_be_refused(self, garbage):
        """Test that bytes of any shape, at any step, end in `Refused` and never anything else (fuzz)."""
        with pytest.raises(Refused):
            Responder(Keyring(["s"]), "Dispatch", WORKER).answer(garbage)
        with pytest.raises(Refused):
            Dialler(Keyring(["s"]), "Dispatch", WORKER).proof(garbage)
        responder = Responder(Keyring(["s"]), "Dispatch", WORKER)
        responder.answer(Dialler(Keyring(["s"]), "Dispatch", WORKER).challenge())
        with pytest.raises(Refused):
            responder.check(garbage)
