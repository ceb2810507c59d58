"""A process started while its PostgreSQL store is down, starting up or shutting down waits it out (issue 35, item 1).

Real PostgreSQL (the session's throwaway server, stopped and started by the
test), real pools with real workers, the real ``leakypool jobs`` command. A
store that cannot work (wrong password, missing database) still fails at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys

import pytest

from tests import pg
from tests.integration.support.child import Child

pytestmark = pytest.mark.integration


class _BackOffs(logging.Handler):
    """Sets ``seen`` once the pool logs a back-off while opening its store (from any thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.loop, self.seen, self.lines = loop, asyncio.Event(), []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "while opening the store" in message:
            self.lines.append(message)
            self.loop.call_soon_threadsafe(self.seen.set)


async def test_a_pool_started_while_postgres_is_down_should_come_up_once_it_is_back(postgres_server, postgres_url):
    """Test a pool entered with the server stopped: it logs its back-offs, and starts when the server does."""
    import pool
    from tests.integration.routines import common as routines

    handler = _BackOffs(asyncio.get_running_loop())
    logging.getLogger("leakypool.jobs").addHandler(handler)
    await asyncio.to_thread(postgres_server.stop, "fast")
    entering = asyncio.ensure_future(pool.WorkerPool(spawn=1, store=postgres_url, store_retry=120).__aenter__())
    try:
        try:
            await asyncio.wait_for(handler.seen.wait(), 60)  # it is waiting, and says so
            assert not entering.done()
        finally:
            await asyncio.to_thread(postgres_server.start)
        p = await asyncio.wait_for(entering, 120)
        try:
            job = await routines.add.submit(1, 2)
            assert await job.result(timeout=60) == 3
        finally:
            await p.__aexit__(None, None, None)
    finally:
        logging.getLogger("leakypool.jobs").removeHandler(handler)
        if not entering.done():
            entering.cancel()
            with contextlib.suppress(BaseException):
                await entering
    line = handler.lines[0]
    assert "cannot connect" in line and "store_retry" in line and pg.PASSWORD not in line


async def test_a_pool_should_give_up_on_a_store_still_down_after_store_retry_in_one_line(postgres_server):
    import pool

    url = f"postgresql://{pg.USER}:{pg.PASSWORD}@127.0.0.1:1/nope"  # nothing listens on port 1
    with pytest.raises(pool.StoreError) as info:
        async with pool.WorkerPool(spawn=0, store=url, store_retry=0.5):
            pass
    text = str(info.value)
    assert "\n" not in text and pg.PASSWORD not in text and "cannot connect" in text


async def test_a_store_that_cannot_work_should_fail_at_once_whatever_store_retry(postgres_server, postgres_url):
    """Test a wrong password and a missing database: ConfigError at the first try, no back-off."""
    import pool

    handler = _BackOffs(asyncio.get_running_loop())
    logging.getLogger("leakypool.jobs").addHandler(handler)
    try:
        wrong_password = postgres_server.url(postgres_url.rsplit("/", 1)[1], password="wrong-password")
        missing = postgres_server.url("no_such_database")
        for url, message in [(wrong_password, "password authentication failed"), (missing, "does not exist")]:
            with pytest.raises(pool.ConfigError, match=message):
                # (far below store_retry: a wait would run into this bound)
                async with asyncio.timeout(60), pool.WorkerPool(spawn=0, store=url, store_retry=600):
                    pass
    finally:
        logging.getLogger("leakypool.jobs").removeHandler(handler)
    assert handler.lines == []


async def test_the_jobs_command_started_while_postgres_is_down_should_wait_for_it(postgres_server, postgres_url):
    """Test ``leakypool jobs URL list`` run with the server stopped: it logs a back-off, then answers."""
    import pool

    async with pool.WorkerPool(spawn=0, store=postgres_url):
        pass  # the schema exists
    await asyncio.to_thread(postgres_server.stop, "fast")
    args = [sys.executable, "-m", "pool._cli._main", "jobs", postgres_url, "list", "--json"]
    env = dict(os.environ, LEAKYPOOL_STORE_RETRY="120")
    started = False
    try:
        async with Child(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as command:
            first = await asyncio.wait_for(command.stderr.readline(), 60)  # its first back-off
            assert b"while opening the store" in first, first
            await asyncio.to_thread(postgres_server.start)
            started = True
            out = await asyncio.wait_for(command.stdout.read(), 120)
            assert await command.wait(60) == 0
    finally:
        if not started:
            await asyncio.to_thread(postgres_server.start)
    assert out.strip() == b"[]"


async def test_a_registry_worker_started_while_postgres_is_down_should_wait_and_record_itself(
    postgres_server, postgres_url
):
    """Test ``leakypool-worker --registry URL`` with the server stopped: back-offs logged, READY once it is back."""
    import pool
    from tests.integration.routines import common as routines
    from tests.integration.support.workers import clean_env

    await asyncio.to_thread(postgres_server.stop, "fast")
    args = [sys.executable, "worker_main.py", "--port", "0", "--registry", postgres_url, "--store-retry", "120"]
    started = False
    try:
        async with Child(args, stderr=subprocess.PIPE, env=clean_env()) as worker:
            first = (await asyncio.wait_for(worker.stderr.readline(), 60)).decode()
            assert "--store-retry" in first and "registry" in first and pg.PASSWORD not in first, first
            await asyncio.to_thread(postgres_server.start)
            started = True
            while b"ready:" not in (line := await asyncio.wait_for(worker.stderr.readline(), 120)):
                assert line, "the worker exited instead of waiting"
            async with pool.WorkerPool(discovery=pool.StoreDiscovery(postgres_url)) as p:
                await p.wait_for_workers(1, timeout=30)
                assert await routines.pid() == worker.pid
    finally:
        if not started:
            await asyncio.to_thread(postgres_server.start)
