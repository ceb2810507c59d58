"""Exit statuses a worker uses on purpose, read by whoever started it (both sides import this).

A worker that exits with `EXIT_RETIRED` meant to: it was recycled (a task
or memory limit) or retired for a hard timeout. Its pool replaces it at
once, with no crash back-off and no crash log, and calls made meanwhile
wait for the replacement. Any other non-zero status is a crash.
"""

from __future__ import annotations

from typing import Final

EXIT_RETIRED: Final[int] = 75
"""A worker exited on purpose and wants a replacement now (recycle, hard timeout): not a crash.

75 is ``EX_TEMPFAIL`` of sysexits.h ("try again"); a supervisor that
restarts on failure (systemd ``Restart=on-failure``) restarts it too.
"""

EXIT_INIT_FAILED: Final[int] = 3
"""The worker's initializer raised: it never served (the traceback is in its log, and sent to its pool)."""

DRAINING_MESSAGE: Final[str] = "worker is draining"
"""How a worker's Reject of a call starts while it drains (`_worker._admission.Verdict.DRAINING`).

Its Reject frame carries it after the status code (``...: UNAVAILABLE: worker is draining (why)``).
A pool that sees it from a worker it spawned knows that worker will exit
and be replaced, so calls wait for the replacement instead of failing.
"""
