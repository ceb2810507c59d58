"""Tests for pool._transport._secret: the per-user secret file, made once and private, and the sources that read it."""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._errors import ConfigError
from pool._transport import _secret
from pool._transport._secret import FILE_MAX_BYTES, SecretSource, load_or_create, read_file, spawn_key, split

words = st.lists(st.text(alphabet="abcXYZ019-_", min_size=1, max_size=6), max_size=8)
separators = st.sampled_from([" ", "\n", "\t", "  \n", "\r\n"])


def written(path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


class TestSpawnKey:
    def test_spawn_key_should_be_one_long_random_token_when_asked_twice(self):
        """Test that a process has one spawn key, made once, of URL-safe characters only."""
        first = spawn_key()
        assert spawn_key() == first
        assert len(first) >= 40 and split(first) == (first,)
        assert set(first) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


class TestSplit:
    @given(words, separators)
    def test_split_should_keep_each_secret_once_in_first_seen_order_when_joined_by_any_whitespace(self, secrets, sep):
        """Test that split returns the words in order, without repeats, whatever whitespace joins them."""
        found = split(sep + sep.join(secrets) + sep)
        assert found == tuple(dict.fromkeys(secrets))
        assert split("\n".join(found)) == found  # what read_file returns splits back to the same secrets

    def test_split_should_return_nothing_when_the_text_is_blank(self):
        """Test that blank text holds no secret."""
        assert split(" \n\t ") == ()


class TestReadFile:
    def test_read_file_should_return_one_secret_a_line_when_the_file_holds_several(self, tmp_path):
        """Test that secrets separated by any whitespace come back one per line, repeats dropped."""
        path = written(tmp_path / "s", "new old\n\nnew\n  third\n")
        assert read_file(path) == "new\nold\nthird"

    def test_read_file_should_raise_file_not_found_when_there_is_no_file(self, tmp_path):
        """Test that a missing file is told apart from a bad one (callers create it then)."""
        with pytest.raises(FileNotFoundError):
            read_file(str(tmp_path / "missing"))

    def test_read_file_should_refuse_an_empty_file(self, tmp_path):
        """Test that a file of whitespace holds no secret and is refused."""
        with pytest.raises(ConfigError, match="is empty"):
            read_file(written(tmp_path / "s", "\n \n"))

    def test_read_file_should_refuse_a_path_that_cannot_be_read(self, tmp_path):
        """Test that an unreadable path (a directory) is a ConfigError naming it."""
        with pytest.raises(ConfigError, match=f"cannot read the secret file {tmp_path}"):
            read_file(str(tmp_path))

    def test_read_file_should_only_warn_when_an_explicit_file_is_readable_by_others(self, tmp_path, caplog):
        """Test that a file given explicitly (a mounted secret) is used even if exposed, with a warning."""
        path = written(tmp_path / "s", "token\n", 0o644)
        with caplog.at_level(logging.WARNING, logger="leakypool.pool"):
            assert read_file(path) == "token"
        assert "readable by other users (mode 0644)" in caplog.text

    @pytest.mark.parametrize("mode", [0o640, 0o604, 0o610, 0o601])
    def test_read_file_should_refuse_when_strict_and_group_or_others_have_any_bit(self, tmp_path, mode):
        """Test that the default secret is refused when anyone but its owner may touch it."""
        tmp_path.chmod(0o700)
        path = written(tmp_path / "s", "token\n", mode)
        with pytest.raises(ConfigError, match="chmod 600"):
            read_file(path, strict=True)

    def test_read_file_should_read_only_the_head_when_the_file_is_huge(self, tmp_path):
        """Test that at most FILE_MAX_BYTES are read (a secret file is a few lines)."""
        path = written(tmp_path / "s", "a" * FILE_MAX_BYTES + " tail\n")
        assert read_file(path) == "a" * FILE_MAX_BYTES


class TestLoadOrCreate:
    def test_load_or_create_should_make_a_private_file_in_a_private_directory_when_none_exists(self, tmp_path):
        """Test that the first use makes the directory 0700 and the file 0600, holding one fresh token."""
        path = tmp_path / "config" / "leakypool" / "secret"
        token = load_or_create(str(path))
        assert split(token) == (token,) and len(token) >= 40
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert os.listdir(path.parent) == ["secret"]  # the temporary file is gone
        assert load_or_create(str(path)) == token

    def test_load_or_create_should_give_every_racer_the_same_secret_when_many_start_at_once(self, tmp_path):
        """Test that threads racing to create the file all read the one token that won."""
        path = str(tmp_path / "leakypool" / "secret")
        barrier = threading.Barrier(8)
        got: list[str | Exception] = []

        def racer():
            barrier.wait(timeout=10)
            try:
                got.append(load_or_create(path))
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                got.append(exc)

        threads = [threading.Thread(target=racer) for _ in range(8)]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads often, so they interleave inside load_or_create
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=10)
        finally:
            sys.setswitchinterval(interval)
        assert len(got) == 8 and len(set(got)) == 1
        assert os.listdir(tmp_path / "leakypool") == ["secret"]

    def test_load_or_create_should_keep_an_existing_secret_when_one_is_there(self, tmp_path):
        """Test that an existing private file is read, not replaced."""
        tmp_path.chmod(0o700)
        assert load_or_create(written(tmp_path / "secret", "mine other\n")) == "mine\nother"

    def test_load_or_create_should_raise_config_error_when_the_file_cannot_be_created(self, tmp_path):
        """Test that a failure to write the new token (here: its temporary name is too long) names the file."""
        path = tmp_path / "leakypool" / ("s" * 250)  # a legal name, but ".<name>.<pid>.<hex>" is not
        with pytest.raises(ConfigError, match=f"cannot create the secret file {path}: File name too long"):
            load_or_create(str(path))
        assert os.listdir(path.parent) == []


class TestSecretSource:
    def test_secrets_should_be_the_given_ones_when_a_secret_is_given_and_the_file_ignored(self, tmp_path):
        """Test that an explicit secret wins over any file, and never shows in a description or repr."""
        source = SecretSource("one two one", str(tmp_path / "missing"), default_path=str(tmp_path / "d"))
        assert source.secrets(create=True) == ("one", "two")
        assert source.get() == "one two"
        assert source.describe() == "the secret given"
        assert "one" not in repr(source)
        assert not (tmp_path / "d").exists()

    def test_init_should_raise_config_error_when_the_given_file_does_not_exist(self, tmp_path):
        """Test that a bad ``secret_file`` fails at construction, not at the first dial."""
        with pytest.raises(ConfigError, match="secret_file: no such file"):
            SecretSource(path=str(tmp_path / "missing"))

    def test_secrets_should_be_empty_until_created_when_the_default_file_is_missing(self, tmp_path):
        """Test that the default file is only read when needed, and made only when asked to."""
        default = tmp_path / "leakypool" / "secret"
        source = SecretSource(default_path=str(default))
        assert source.secrets() == () and source.get() is None
        assert not default.exists()
        made = source.secrets(create=True)
        assert len(made) == 1 and default.read_text().split() == list(made)
        assert source.describe() == f"the secret file {default}"

    def test_secrets_should_be_empty_and_logged_when_the_default_file_is_exposed(self, tmp_path, caplog):
        """Test that a default secret others can read is not used (strict), and the reason is logged."""
        tmp_path.chmod(0o700)
        path = written(tmp_path / "secret", "token\n", 0o644)
        with caplog.at_level(logging.ERROR, logger="leakypool.pool"):
            assert SecretSource(default_path=path).secrets() == ()
        assert "readable by other users" in caplog.text

    def test_secrets_should_use_an_exposed_file_when_it_was_given_explicitly(self, tmp_path, caplog):
        """Test that an explicit file is only warned about, where the default one is refused."""
        path = written(tmp_path / "secret", "token\n", 0o644)
        with caplog.at_level(logging.WARNING, logger="leakypool.pool"):
            assert SecretSource(path=path).secrets() == ("token",)

    def test_secrets_should_not_look_again_within_the_reload_period_when_the_file_changed(self, tmp_path, monkeypatch):
        """Test that a file is not re-read on every dial: a change shows only once RELOAD_S has passed."""
        path = written(tmp_path / "secret", "old\n")
        source = SecretSource(path=path)
        monkeypatch.setattr(_secret, "RELOAD_S", 3600.0)
        assert source.secrets() == ("old",)
        written(tmp_path / "secret", "new\n")
        assert source.secrets() == ("old",)
        monkeypatch.setattr(_secret, "RELOAD_S", 0.0)
        assert source.secrets() == ("new",)

    def test_secrets_should_keep_the_last_ones_when_the_file_turns_bad(self, tmp_path, monkeypatch, caplog):
        """Test that a file emptied mid-rotation leaves the secrets last read in use, and logs why."""
        monkeypatch.setattr(_secret, "RELOAD_S", 0.0)
        path = written(tmp_path / "secret", "old\n")
        source = SecretSource(path=path)
        written(tmp_path / "secret", "\n\n\n\n")
        with caplog.at_level(logging.ERROR, logger="leakypool.pool"):
            assert source.secrets() == ("old",)
        assert "is empty" in caplog.text

    @pytest.mark.parametrize(
        ("fault", "message"),
        [
            ("file_writable", r"the secret file .* is writable by other users"),
            ("dir_writable", r"the directory .* is writable by other users"),
            ("dir_sticky", r"the directory .* is writable by other users \(mode 1777\)"),
            ("dir_owner", r"the directory .* belongs to uid 65534"),
            ("file_owner", r"belongs to uid 65534, neither this user"),
        ],
    )
    def test_read_file_should_refuse_a_secret_file_another_user_could_write(self, tmp_path, fault, message):
        """Test issue 51 finding 7: a --secret-file whose file or directory another user owns or may write is
        refused (it decides whom the process trusts), not merely warned about."""
        place = tmp_path / "place"
        place.mkdir(mode=0o700)
        path = written(place / "secret", "s\n")
        if fault == "file_writable":
            os.chmod(path, 0o622)  # noqa: S103 - the fault under test
        elif fault == "dir_writable":
            place.chmod(0o770)
        elif fault == "dir_sticky":
            place.chmod(0o1777)
        elif os.getuid() != 0:
            pytest.skip("only root can give a file to another user")
        elif fault == "dir_owner":
            os.chown(place, 65534, 65534)
        else:
            os.chown(path, 65534, 65534)
        with pytest.raises(ConfigError, match=message):
            read_file(path)

    def test_secrets_should_keep_the_old_ones_when_another_user_replaced_the_file(self, tmp_path, monkeypatch, caplog):
        """Test the reload: a replacement that another user could have written is refused too (the finding: it
        was loaded within a second), and the secrets read before stay in use."""
        monkeypatch.setattr(_secret, "RELOAD_S", 0.0)
        path = written(tmp_path / "secret", "mine\n")
        source = SecretSource(path=path)
        written(tmp_path / "secret", "theirs\n", mode=0o666)
        with caplog.at_level(logging.ERROR, logger="leakypool.pool"):
            assert source.secrets() == ("mine",)
        assert "writable by other users" in caplog.text

    def test_read_file_should_follow_a_link_and_hold_its_target_to_the_same_rules(self, tmp_path):
        """Test a secret reached through a link (a Kubernetes Secret volume's ..data): read, and checked."""
        target = written(tmp_path / "real", "s\n")
        (tmp_path / "link").symlink_to(target)
        assert read_file(str(tmp_path / "link")) == "s"
        os.chmod(target, 0o666)  # noqa: S103 - the fault under test
        with pytest.raises(ConfigError, match="writable by other users"):
            read_file(str(tmp_path / "link"))

    def test_secrets_should_be_empty_when_nothing_is_given_and_there_is_no_default(self):
        """Test that a source with neither secret nor file holds nothing (and reads nothing)."""
        source = SecretSource()
        assert source.secrets(create=True) == () and source.get() is None
