"""Tests for pool._transport._trust: the keys one end holds and the local users it believes."""

from __future__ import annotations

import os

from pool._transport._handshake import key
from pool._transport._secret import SecretSource
from pool._transport._trust import Trust


class TestTrust:
    def test_of_should_trust_this_uid_and_the_peer_uids_when_some_are_given(self):
        """Test that a trust always includes this process's own uid, plus any extra peers."""
        assert Trust.of("s").uids == frozenset({os.getuid()})
        assert Trust.of("s", peer_uids=[4242, 4243]).uids == frozenset({os.getuid(), 4242, 4243})

    def test_of_should_hold_the_fixed_secrets_first_and_then_the_sources(self, tmp_path):
        """Test that the keyring holds the fixed secrets, preferred, before those of the source."""
        path = tmp_path / "secret"
        path.write_text("from-file\n")
        path.chmod(0o600)
        trust = Trust.of("fixed", source=SecretSource(path=str(path)))
        assert trust.keyring.held() == (key("fixed"), key("from-file"))

    def test_own_should_keep_only_the_fixed_keys_and_the_uids_when_a_source_is_held_too(self, tmp_path):
        """Test that a pool's own workers get its fixed keys only, never a file's (and the same peers)."""
        path = tmp_path / "secret"
        path.write_text("from-file\n")
        path.chmod(0o600)
        trust = Trust.of("fixed", source=SecretSource(path=str(path)), peer_uids=[4242])
        own = trust.own()
        assert own.keyring.held() == (key("fixed"),)
        assert own.uids == trust.uids
        assert trust.keyring.held() == (key("fixed"), key("from-file"))  # the original is unchanged

    def test_repr_should_say_where_the_keys_come_from_and_never_show_a_secret(self):
        """Test that a repr names the keys' sources and the sorted uids, and no secret."""
        text = repr(Trust.of("hunter2", source=SecretSource("s3cret"), peer_uids=[99999, 99998]))
        assert "hunter2" not in text and "s3cret" not in text
        assert "a key of its own and the secret given" in text
        assert f"uids {sorted({os.getuid(), 99998, 99999})}" in text
