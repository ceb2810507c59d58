"""Tests for names a package loads on first use (`pool._base._lazy`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pool._base._lazy import lazy_attribute


class TestLazyAttribute:
    def test_a_listed_name_should_load_its_module_and_be_kept(self):
        """Test that a name in the table is read from its module (relative to the package) and kept for next time."""
        namespace: dict[str, object] = {}
        value = lazy_attribute("pool._base", {"new_uid": "._ids"}, namespace, "new_uid")
        from pool._base._ids import new_uid

        assert value is new_uid
        assert namespace == {"new_uid": new_uid}

    def test_an_unlisted_name_should_raise_attribute_error(self):
        """Test that a name the table does not list is an AttributeError naming the package (hasattr() is False)."""
        with pytest.raises(AttributeError, match=r"'pool\._transport' has no attribute 'Nope'"):
            lazy_attribute("pool._transport", {}, {}, "Nope")

    def test_a_package_should_load_a_lazy_module_only_when_its_name_is_read(self):
        """Test, in a fresh process, that importing pool._transport leaves the gRPC channel unloaded until
        ``GrpcChannel`` is read, and that reading it loads it."""
        code = (
            "import sys, pool._transport as t\n"
            "before = 'pool._transport._grpc_channel' in sys.modules\n"
            "t.GrpcChannel\n"
            "print(before, 'pool._transport._grpc_channel' in sys.modules, 'GrpcChannel' in vars(t))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
        assert out.stdout.split() == ["False", "True", "True"]
