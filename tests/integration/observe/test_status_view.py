"""``leakypool status``: the live view run in a real terminal (tmux) against a busy pool, as a person would."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from tests.integration.routines import common as routines
from tests.integration.support.helpers import eventually
from tests.integration.support.signals import Signals

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (tools/install_system_packages.sh)"),
]

CLI = [sys.executable, "-m", "pool._cli._main", "status"]


class Terminal:
    """A detached tmux session of its own (its own server socket), 120x40, killed at the end."""

    def __init__(self) -> None:
        self.socket = f"leakypool-test-{uuid.uuid4().hex[:8]}"

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], check=True, capture_output=True, text=True, timeout=30
        ).stdout

    def start(self, command: list[str]) -> None:
        self.tmux("new-session", "-d", "-x", "120", "-y", "40", " ".join(command) + "; sleep 600")

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=30, check=False)


async def test_the_live_view_should_show_a_busy_pool_and_refresh_in_place(one_slot_pool):
    """Test the view in a terminal: both workers full, then idle, on one screen that is redrawn, not scrolled."""
    terminal = Terminal()
    async with Signals() as signals, one_slot_pool(spawn=2, metrics_port=0, queue_depth=10) as p:
        busy = [asyncio.ensure_future(routines.sleep(600, signals.address, f"b{i}")) for i in range(3)]
        try:
            for _i in range(2):
                await signals.wait("started")
            host, port = p.metrics_address
            terminal.start([*CLI, f"{host}:{port}", "--interval", "0.2"])
            pids = [str(pid) for pid in p.pids]

            def shows_busy() -> bool:
                screen = terminal.screen()
                return all(pid in screen for pid in pids) and screen.count("1/1") == 2 and "2 running" in screen

            await eventually(shows_busy, timeout=30, interval=0.1)
            assert "1 waiting" in terminal.screen()  # the third call queued for a worker
            for call in busy:
                call.cancel()
            await asyncio.gather(*busy, return_exceptions=True)

            def shows_idle() -> bool:
                screen = terminal.screen()
                return screen.count("0/1") == 2 and "0 running" in screen

            await eventually(shows_idle, timeout=30, interval=0.1)
            screen = terminal.screen()
            assert screen.count("leakypool ") == 1 and screen.count("workers") == 2  # redrawn in place
        finally:
            terminal.close()
            for call in busy:
                call.cancel()


async def test_once_and_json_should_print_one_frame_and_the_data(one_slot_pool):
    async with one_slot_pool(spawn=1, metrics_port=0) as p:
        await routines.add(1, 2)
        host, port = p.metrics_address
        pids = p.pids
        once = await asyncio.to_thread(
            subprocess.run,
            [*CLI, f"http://{host}:{port}", "--once"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "120"},
        )
        data = await asyncio.to_thread(
            subprocess.run, [*CLI, f"{host}:{port}", "--json"], capture_output=True, text=True, timeout=60
        )
    assert once.returncode == 0 and str(pids[0]) in once.stdout and "0/1" in once.stdout
    status = json.loads(data.stdout)
    assert [w["pid"] for w in status["workers"]] == pids and status["calls"]["dispatched"] >= 1


async def test_an_unreachable_address_should_fail_in_one_line():
    result = await asyncio.to_thread(
        subprocess.run, [*CLI, "127.0.0.1:9", "--once"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "127.0.0.1:9" in result.stderr
