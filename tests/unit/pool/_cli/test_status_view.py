"""Tests for ``leakypool status``'s frame (`pool._cli._status_view.render`): one line per row at 80 and 120.

The live view in a real terminal (tmux, 120 columns) is
tests/integration/observe/test_status_view.py; here the frame is printed at both
widths from a ``/status`` document shaped like a real pool's.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from pool._cli._status_view import render

UIDS = ["0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b", "0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f3c4d"]
STATUS = {
    "workers": [
        {
            "uid": UIDS[0],
            "local": True,
            "address": "unix:/tmp/leakypool-3f2a9c1d/w-3.sock",
            "in_flight": 3,
            "capacity": 4,
            "idle_s": None,
            "memory": 123 * 2**20,
            "pid": 41234,
        },
        {
            "uid": UIDS[1],
            "local": False,
            "address": "10.0.0.17:50051",
            "in_flight": 0,
            "capacity": 4,
            "idle_s": 12.5,
            "memory": None,
            "pid": 5120,
        },
    ],
    "calls": {"running": 3, "waiting_for_worker": 1, "waiting_for_limits": 0, "rejected": 0},
    "rates": {"calls_per_s": 12.3},
    "queues": {
        "queue:emails-to-customers-in-the-eu-region": {"running": 2, "waiting": 17},
        "key:user-1": {"running": 1, "waiting": 0},
    },
    "jobs": {"pending": 4, "running": 3},
}
SHORT_UIDS = [f"{u[:8]}…{u[-4:]}" for u in UIDS]


def printed(width: int) -> list[str]:
    out = io.StringIO()
    Console(width=width, file=out, force_terminal=False).print(render(STATUS, "127.0.0.1:9100", width))
    return out.getvalue().splitlines()


def row_of(lines: list[str], needle: str) -> str:
    found = [line for line in lines if needle in line]
    assert len(found) == 1, (needle, lines)
    return found[0]


@pytest.mark.parametrize("width", [80, 120])
def test_each_worker_and_queue_should_be_one_line_with_uid_and_occupancy_whole(width):
    """Test that every worker and queue is one line no wider than the terminal; uid, occupancy, pid whole."""
    lines = printed(width)
    assert max(len(line) for line in lines) <= width
    assert row_of(lines, SHORT_UIDS[0]).count("3/4") == 1 and "*" in row_of(lines, SHORT_UIDS[0])
    assert "0/4" in row_of(lines, SHORT_UIDS[1])
    assert " 41234 " in row_of(lines, SHORT_UIDS[0])
    assert row_of(lines, "key:user-1").split("│")[2:4] == ["       1 ", "       0 "]
    assert " 17 " in row_of(lines, "queue:emails")
    assert row_of(lines, "calls/s").endswith("0 rejected")  # the header: on two lines rather than cut


def test_at_80_columns_the_idle_time_should_go_and_the_address_be_cut():
    """Test that 80 columns drop the idle time, keep memory and pid, and cut a long address with an ellipsis."""
    lines = printed(80)
    header = row_of(lines, "in flight / capacity")
    assert "idle s" not in header and "memory" in header and "pid" in header and "address" in header
    assert "unix:/tmp/leakypo…" in row_of(lines, SHORT_UIDS[0])


def test_at_120_columns_every_column_and_the_whole_address_should_show():
    """Test that 120 columns show every column, the full bar and the whole address."""
    lines = printed(120)
    header = row_of(lines, "in flight / capacity")
    assert all(h in header for h in ("uid", "address", "idle s", "memory", "pid"))
    assert STATUS["workers"][0]["address"] in row_of(lines, SHORT_UIDS[0])
    assert "█" * 15 + "░" * 5 + " 3/4" in row_of(lines, SHORT_UIDS[0])
    assert lines[0] == "leakypool 127.0.0.1:9100  2 workers · 3 running · 1 waiting · 12.3 calls/s · 0 rejected"
