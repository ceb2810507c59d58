"""Tests for pool._worker._keys: where a worker's secret comes from, whom it lets in, and the variable forgotten.

Real files in a private config directory per test (``XDG_CONFIG_HOME``); the handshake itself is in
tests/unit/pool/_transport/test_handshake.py, a real worker's in tests/integration/trust/test_worker_secret.py.
"""

from __future__ import annotations

import os
import pathlib
import stat

import pytest

from pool._config._places import default_secret_file
from pool._config._settings import ConfigError, WorkerConfig
from pool._transport._handshake import key
from pool._worker._keys import forget_secret, worker_trust


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    """A config directory of this test's own: the user's default secret file goes there."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


class TestWorkerTrust:
    def test_worker_trust_should_hold_the_secrets_given_and_make_no_file_when_a_secret_is_given(self, config_home):
        """Test that LEAKYPOOL_SECRET (several, whitespace-separated) is the worker's keyring, with no file read or made."""
        trust = worker_trust(WorkerConfig(secret="first second"))
        assert trust.keyring.held() == (key("first"), key("second"))
        assert not os.path.exists(default_secret_file())

    def test_worker_trust_should_read_the_secret_file_when_one_is_given(self, config_home, tmp_path):
        """Test that --secret-file's lines are the keys, and the default file is never made."""
        path = tmp_path / "secret"
        path.write_text("one\ntwo\n")
        path.chmod(0o600)
        trust = worker_trust(WorkerConfig(secret_file=str(path)))
        assert trust.keyring.held() == (key("one"), key("two"))
        assert not os.path.exists(default_secret_file())

    def test_worker_trust_should_make_the_users_own_private_secret_when_none_is_given(self, config_home):
        """Test the default: this user's own secret file, made on first use, private, and the same on the next start."""
        trust = worker_trust(WorkerConfig())
        path = default_secret_file()
        assert path.startswith(str(config_home))
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        (held,) = trust.keyring.held()
        assert held == key(pathlib.Path(path).read_text().strip())
        assert worker_trust(WorkerConfig()).keyring.held() == (held,)  # read again, not made anew

    def test_worker_trust_should_raise_config_error_when_the_secret_holds_no_key(self, config_home):
        """Test that a secret of whitespace only is refused at start, naming where it came from, not the secret."""
        with pytest.raises(ConfigError, match="no secret to prove this worker with: the secret given holds none"):
            worker_trust(WorkerConfig(secret="  \n "))

    def test_worker_trust_should_raise_config_error_when_the_secret_file_is_empty(self, config_home, tmp_path):
        """Test that an empty --secret-file fails at start rather than leaving a worker nobody can reach."""
        path = tmp_path / "empty"
        path.write_text("")
        path.chmod(0o600)
        with pytest.raises(ConfigError, match="empty"):
            worker_trust(WorkerConfig(secret_file=str(path)))

    def test_worker_trust_should_let_in_its_own_uid_and_the_peer_uids(self, config_home):
        """Test that the trusted uids are this process's own plus --peer-uids."""
        trust = worker_trust(WorkerConfig(secret="s", peer_uids=(40001, 40002)))
        assert trust.uids == frozenset({os.getuid(), 40001, 40002})
        assert worker_trust(WorkerConfig(secret="s")).uids == frozenset({os.getuid()})


class TestForgetSecret:
    def test_forget_secret_should_remove_the_variable_when_it_is_set(self, monkeypatch):
        """Test that routines (and their children) no longer see LEAKYPOOL_SECRET once the worker read it."""
        monkeypatch.setenv("LEAKYPOOL_SECRET", "s")
        monkeypatch.setenv("LEAKYPOOL_SECRET_FILE", "/elsewhere")
        forget_secret()
        assert "LEAKYPOOL_SECRET" not in os.environ
        assert os.environ["LEAKYPOOL_SECRET_FILE"] == "/elsewhere"  # a path, not a secret: left alone

    def test_forget_secret_should_do_nothing_when_it_is_not_set(self, monkeypatch):
        """Test that forgetting twice (or with no variable) does not raise."""
        monkeypatch.delenv("LEAKYPOOL_SECRET", raising=False)
        forget_secret()
        forget_secret()
        assert "LEAKYPOOL_SECRET" not in os.environ
