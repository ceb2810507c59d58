"""Tests for pool._base._private: directories that carry trust are made 0700 and refused when not private."""

from __future__ import annotations

import os
import stat

import pytest

from pool._base._private import check_private, private_directory
from pool._errors import ConfigError

NOBODY = 65534


class TestPrivateDirectory:
    def test_it_should_be_made_0700_whatever_the_umask(self, tmp_path):
        old = os.umask(0)
        try:
            path = private_directory(str(tmp_path / "a" / "b"), what="the test directory")
        finally:
            os.umask(old)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700

    @pytest.mark.parametrize("mode", [0o755, 0o770, 0o701, 0o1777])
    def test_one_open_to_others_should_be_refused_with_the_fix(self, tmp_path, mode):
        path = tmp_path / "open"
        path.mkdir()
        path.chmod(mode)
        with pytest.raises(ConfigError, match=f"chmod 700 {path}"):
            private_directory(str(path), what="the test directory")

    def test_a_link_should_be_refused(self, tmp_path):
        (tmp_path / "real").mkdir(mode=0o700)
        (tmp_path / "link").symlink_to(tmp_path / "real")
        with pytest.raises(ConfigError, match="not a directory"):
            check_private(str(tmp_path / "link"), what="the test directory")

    @pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another user needs root")
    def test_one_another_user_made_should_be_refused_naming_the_owner(self, tmp_path):
        path = tmp_path / "theirs"
        path.mkdir(mode=0o700)
        os.chown(path, NOBODY, NOBODY)
        with pytest.raises(ConfigError, match=f"belongs to uid {NOBODY}.*another user made it"):
            private_directory(str(path), what="the test directory")
