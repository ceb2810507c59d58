"""Test harness: async tests run on uvloop; no test may leak a process.

Async test functions run in a fresh event loop each (a tiny stand-in for
pytest-asyncio, which the suite does not need: fixtures stay synchronous,
tests open pools with ``async with``).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import tempfile
import threading
from collections.abc import Iterator

import pytest
import uvloop
from hypothesis import register_random

from pool._base._random import RANDOM

register_random(RANDOM)  # the one random generator (STYLE.md): a failing example replays with the same draws


@pytest.fixture(autouse=True, scope="session")
def private_secret() -> Iterator[str]:
    """Point the per-user worker secret at a directory of this session's own (``XDG_CONFIG_HOME``).

    Workers on TCP require it and pools find it there (pool._transport._secret);
    every worker subprocess inherits the variable (``clean_env`` keeps it). So a
    test run never writes the developer's own ``~/.config/leakypool/secret``, and
    runs side by side do not share one. Returns the secret file's path.
    """
    saved = os.environ.get("XDG_CONFIG_HOME")
    with tempfile.TemporaryDirectory(prefix="leakypool-test-config-") as home:
        os.environ["XDG_CONFIG_HOME"] = home
        try:
            yield os.path.join(home, "leakypool", "secret")
        finally:
            if saved is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = saved


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests to completion on a new uvloop loop."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    kwargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(pyfuncitem.obj(**kwargs))
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()
    return True


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=10))


def children() -> set[int]:
    """Pids whose parent is this process (running or zombie)."""
    me = os.getpid()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.add(int(entry))
    return found


PROCESS_WIDE_THREADS = ("_poll_wrapper",)
"""Threads a library starts once per process and keeps: grpc.aio's poller."""


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """Fail a test that leaves a Python thread running (a pool must not need any)."""
    before = set(threading.enumerate())
    yield
    leaked = [
        t
        for t in threading.enumerate()
        if t not in before and t.is_alive() and not any(name in t.name for name in PROCESS_WIDE_THREADS)
    ]
    for thread in leaked:
        thread.join(timeout=5)  # a thread on its way out gets a moment to finish
    leaked = [t for t in leaked if t.is_alive()]
    assert not leaked, f"the test left threads running: {leaked}"


@pytest.fixture(autouse=True)
def no_leaked_processes() -> Iterator[None]:
    """Fail a test that leaves a child process behind; kill and reap it either way."""
    before = children()
    yield
    leaked = children() - before
    if not leaked:
        return
    described = _describe(leaked)
    for pid in leaked:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    pytest.fail(f"the test left child processes behind: {described}")


def _describe(pids: set[int]) -> str:
    out = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append(f"{pid}: " + f.read().replace(b"\0", b" ").decode(errors="replace")[:120])
        except OSError:
            out.append(f"{pid}: ?")
    return "; ".join(out)


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL cluster for the whole session (skipped, with the reason, where none is installed)."""
    from tests import pg

    if pg.find_bindir() is None:
        pytest.skip("PostgreSQL is not installed here; tools/install_system_packages.sh installs it")
    with pg.server() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server, request) -> str:
    """A fresh, empty database on the session's server, for this test."""
    import re

    name = "t_" + re.sub(r"\W", "_", request.node.name)[-40:].lower() + f"_{os.getpid()}_{id(request) % 10_000}"
    postgres_server.psql(f"CREATE DATABASE {name} OWNER {postgres_server_user()}")
    return postgres_server.url(name)


def postgres_server_user() -> str:
    from tests import pg

    return pg.USER
