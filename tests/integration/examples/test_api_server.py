"""examples/api_server.py over real HTTP: a burst past the ceiling gets exactly one 429."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

from tests.integration.routines.common import max_overlap
from tests.integration.support.child import Child

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")
pytest.importorskip("uvicorn", reason="the web extra is not installed (pip install -e '.[web]')")
httpx = pytest.importorskip("httpx", reason="the test extra is not installed")

pytestmark = pytest.mark.integration

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "api_server.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_sixteen_slow_requests_over_a_ceiling_of_fifteen_should_get_exactly_one_429():
    port = free_port()
    args = [sys.executable, str(EXAMPLE), "--workers", "3", "--ceiling", "15", "--port", str(port)]
    async with Child(args, stderr=subprocess.PIPE) as server:
        async with asyncio.timeout(60):
            while b"Uvicorn running on" not in await server.stderr.readline():
                pass
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            responses = await asyncio.gather(*(client.get("/work", params={"seconds": 0.6}) for _ in range(16)))
            stats = (await client.get("/stats")).json()
        server.signal(signal.SIGINT)  # graceful: the app's pool stops and reaps its workers
        assert await server.wait(60) == 0
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 15 + [429]
    (refused,) = [r for r in responses if r.status_code == 429]
    assert int(refused.headers["Retry-After"]) >= 1
    spans = [(r.json()["start"], r.json()["end"]) for r in responses if r.status_code == 200]
    assert max_overlap(spans) <= 3
    assert len({r.json()["pid"] for r in responses if r.status_code == 200}) <= 3
    assert stats["rejected"] == 1 and stats["dispatched"] == 15
