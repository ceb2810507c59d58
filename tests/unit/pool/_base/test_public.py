"""Tests for public names under their public path (`pool._base._public`)."""

from __future__ import annotations

import subprocess
import sys

import pool
from pool._base._public import PUBLIC_MODULE, public


class TestPublic:
    def test_public_should_name_the_public_module(self):
        """Test that a class and a function given to `public` pickle-name ``pool``."""

        class Local:
            pass

        def local() -> None:
            pass

        public(Local, local)
        assert Local.__module__ == local.__module__ == PUBLIC_MODULE == "pool"

    def test_every_public_name_should_be_pool_x_before_pool_x_is_touched(self):
        """Test that each name in ``pool.__all__`` is named ``pool`` as soon as its family's package exports it,
        in a fresh process, before anything reads it through ``pool`` (the lazy fix-up this replaces did not)."""
        code = (
            "import importlib, pool\n"
            "wrong = []\n"
            "for name, where in pool._LAZY.items():\n"
            "    module = importlib.import_module(where, 'pool')\n"
            "    obj = getattr(module, name)\n"  # (from its family's package, not pool: that is what must not be needed)
            "    if obj.__module__ != 'pool': wrong.append(f'{name}: {obj.__module__}')\n"
            "print('\\n'.join(wrong))\n"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
        assert out.stdout.strip() == ""

    def test_every_eager_public_name_should_be_pool_x(self):
        """Test the names ``pool`` imports at once (its errors) are named ``pool`` too."""
        eager = [name for name in pool.__all__ if name not in pool._LAZY]
        assert eager and all(getattr(pool, name).__module__ == "pool" for name in eager)
