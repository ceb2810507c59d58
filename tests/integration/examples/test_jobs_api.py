"""examples/jobs_api.py over real HTTP: 202 and attach, 429 past the ceiling, jobs survive a SIGKILL."""

from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tests.integration.examples.test_api_server import free_port
from tests.integration.support.child import Child
from tests.integration.support.helpers import eventually

pytest.importorskip("starlette", reason="the web extra is not installed (pip install -e '.[web]')")
httpx = pytest.importorskip("httpx", reason="the test extra is not installed")

pytestmark = pytest.mark.integration

EXAMPLE = pathlib.Path(__file__).resolve().parents[3] / "examples" / "jobs_api.py"

SETTINGS = {"LEAKYPOOL_LEASE_TTL": "3", "LEAKYPOOL_SHUTDOWN_GRACE": "1"}
"""The servers' job lease (the crashed server's jobs are revived this long after the SIGKILL) and the grace the
30 s job still running at the last SIGINT gets (10 s each by default: time the test only waited)."""


async def serve(store: pathlib.Path, port: int, *extra: str) -> Child:
    args = [sys.executable, str(EXAMPLE), "--store", str(store), "--workers", "1", "--port", str(port), *extra]
    server = Child(args, stderr=subprocess.PIPE, env={**os.environ, **SETTINGS})
    await server.__aenter__()
    async with asyncio.timeout(60):
        while b"Uvicorn running on" not in await server.stderr.readline():
            pass
    return server


async def test_jobs_api_should_accept_attach_refuse_and_survive_a_crash(tmp_path):
    store, port = tmp_path / "jobs.db", free_port()
    server = await serve(store, port, "--ceiling", "3")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            first = await client.post("/jobs", params={"file": "a.pdf", "seconds": 30})
            again = await client.post("/jobs", params={"file": "a.pdf", "seconds": 30})
            assert first.status_code == again.status_code == 202
            assert first.json()["id"] == again.json()["id"] == "convert:a.pdf"  # attached, not a second job
            for name in ("b.pdf", "c.pdf"):
                assert (await client.post("/jobs", params={"file": name, "seconds": 0.1})).status_code == 202
            refused = await client.post("/jobs", params={"file": "d.pdf"})
            assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
            assert (await client.get("/jobs/nope")).status_code == 404

            async def a_runs() -> bool:  # the crash must catch a.pdf running (on a loaded machine it may start late)
                return (await client.get("/jobs/convert:a.pdf")).json()["state"] == "running"

            await eventually(a_runs, timeout=60, interval=0.05)
    finally:
        server.signal(signal.SIGKILL)  # a crash: the three accepted jobs are in the store
        await server.__aexit__(None, None, None)
    server = await serve(store, port)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:

            async def succeeded() -> bool:
                return (await client.get("/jobs/convert:b.pdf")).json()["state"] == "succeeded"

            await eventually(succeeded, timeout=120, interval=0.05)  # revived and run by the new server
            assert (await client.get("/jobs/convert:b.pdf")).json()["result"]["file"] == "b.pdf"
            job = (await client.get("/jobs/convert:a.pdf")).json()
            assert job["state"] in ("pending", "running")  # revived after the crash, still there
        server.signal(signal.SIGINT)
        assert await server.wait(60) == 0
    finally:
        await server.__aexit__(None, None, None)
