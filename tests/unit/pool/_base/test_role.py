"""Tests for pool._base._role: a process is on the pool's side until its worker entry point says otherwise.

The transition runs in a fresh interpreter: marking this test process a
worker would change how every later test behaves (it is never undone).
"""

from __future__ import annotations

import os
import subprocess
import sys

from pool._base._role import in_worker

WAIT_S = 60.0
"""Bound on the child interpreter (it starts and exits in well under a second)."""

SCRIPT = """
from pool._base._role import become_worker, in_worker
print(in_worker())
become_worker()
print(in_worker())
become_worker()
print(in_worker())
"""


class TestRole:
    def test_in_worker_should_be_false_when_no_worker_entry_point_ran(self):
        """Test that the pool's own process (this test run) is not a worker."""
        assert in_worker() is False

    def test_become_worker_should_mark_the_process_a_worker_for_good(self):
        """Test that a fresh process starts on the pool's side, is a worker once it says so, and stays one."""
        env = os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}  # imports this tree's pool, as we do
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=WAIT_S, check=True
        )
        assert done.stdout.split() == ["False", "True", "True"]
