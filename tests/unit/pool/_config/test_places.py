"""Tests for pool._config._places: where the local registry and the workers' secret live by default."""

from __future__ import annotations

import os
import pwd
import tempfile

import pytest

from pool._config._places import default_registry, default_secret_file


class TestDefaultRegistry:
    def test_default_registry_should_be_the_variable_when_it_is_set(self, tmp_path):
        """Test that LEAKYPOOL_LOCAL_REGISTRY wins over every directory variable."""
        environ = {"LEAKYPOOL_LOCAL_REGISTRY": str(tmp_path / "reg"), "XDG_RUNTIME_DIR": "/run/user/1"}
        assert default_registry(environ) == str(tmp_path / "reg")

    def test_default_registry_should_be_per_user_under_the_runtime_dir_when_the_variable_is_empty(self):
        """Test that an empty variable counts as unset, and the runtime directory comes before TMPDIR."""
        environ = {"LEAKYPOOL_LOCAL_REGISTRY": "", "XDG_RUNTIME_DIR": "/run/user/1", "TMPDIR": "/var/tmp"}
        assert default_registry(environ) == f"/run/user/1/leakypool-{os.getuid()}"

    def test_default_registry_should_fall_back_to_tmpdir_then_the_temp_dir(self):
        """Test the order: XDG_RUNTIME_DIR, then TMPDIR, then the platform's temp directory."""
        assert default_registry({"TMPDIR": "/var/tmp"}) == f"/var/tmp/leakypool-{os.getuid()}"
        assert default_registry({}) == os.path.join(tempfile.gettempdir(), f"leakypool-{os.getuid()}")


class TestDefaultSecretFile:
    def account_config(self) -> str:
        return os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".config", "leakypool", "secret")

    def test_default_secret_file_should_be_under_an_owned_xdg_config_home(self, tmp_path):
        """Test an absolute config directory this user owns."""
        assert default_secret_file({"XDG_CONFIG_HOME": str(tmp_path)}) == str(tmp_path / "leakypool" / "secret")

    def test_default_secret_file_should_accept_an_xdg_config_home_that_does_not_exist_yet(self, tmp_path):
        """Test that a config directory not made yet is taken (the secret's writer makes it)."""
        base = tmp_path / "not-yet"
        assert default_secret_file({"XDG_CONFIG_HOME": str(base)}) == str(base / "leakypool" / "secret")

    @pytest.mark.parametrize("base", ["", "relative/config"])
    def test_default_secret_file_should_use_the_accounts_home_when_xdg_config_home_is_not_absolute(self, base):
        """Test that an unset or relative XDG_CONFIG_HOME falls back to the password database's home."""
        assert default_secret_file({"XDG_CONFIG_HOME": base}) == self.account_config()

    def test_default_secret_file_should_ignore_home_when_falling_back(self, tmp_path):
        """Test that $HOME (kept by sudo) is not where the fallback looks."""
        assert default_secret_file({"HOME": str(tmp_path)}) == self.account_config()

    def test_default_secret_file_should_refuse_an_xdg_config_home_another_user_owns(self, tmp_path):
        """Test that a config directory owned by someone else is not trusted (another user may have made it)."""
        if os.getuid() == 0:  # root can hand a directory of its own to another user
            foreign = tmp_path / "foreign"
            foreign.mkdir()
            os.chown(foreign, 65534, -1)
        else:  # anyone else: root's own
            foreign = "/"
        assert default_secret_file({"XDG_CONFIG_HOME": str(foreign)}) == self.account_config()
