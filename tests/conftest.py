"""Test harness: async tests run on uvloop; no test may leak a process.

Async test functions run in a fresh event loop each (a tiny stand-in for
pytest-asyncio, which the suite does not need: fixtures stay synchronous,
tests open pools with ``async with``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import os
import signal
import sqlite3
import tempfile
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import uvloop
from hypothesis import register_random

from pool._base._random import RANDOM

register_random(RANDOM)  # the one random generator (_base/_random.py): failing examples replay the same draws


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
            for _ in range(CLOSING_TURNS):
                loop.run_until_complete(asyncio.sleep(0))  # transports closed in the test's last lines finish closing
        finally:
            asyncio.set_event_loop(None)
            _close(loop)
    return True


CLOSING_TURNS = 2
"""Loop turns given, after a test, to what it closed last: a transport's handle closes a turn after ``close()``."""


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close ``loop``; what it found still open is then reported as the warning it is, after it closed.

    uvloop warns (ResourceWarning) about each handle still open from inside
    the C callback that closes them. With the suite's warnings made errors,
    that warning raised there, the callback returned early, the handle stayed
    open, and ``close`` waited for it for ever in ``epoll_wait`` (a rare hang
    of the unit suite). Recorded instead, the close completes; re-raised here,
    a test that leaves a connection open still fails, and says which.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop.close()
    for warning in caught:
        warnings.warn_explicit(
            warning.message, warning.category, warning.filename, warning.lineno, source=warning.source
        )


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


class Connections(list[Any]):
    """The database connections (sqlite3's, asyncpg's) opened during one test."""

    def still_open(self) -> list[Any]:
        """Those not closed yet."""
        return [c for c in self if not _closed(c)]

    def closed_and_collected(self) -> int:
        """Check that each one is closed, then hand them to the garbage collector; how many there were.

        Run under ``-W error::ResourceWarning`` (``filterwarnings = error``), collecting one left open
        fails the test on Python 3.13+; the check before it fails it on every Python.
        """
        left = self.still_open()
        assert not left, f"database connections left open: {left}"
        count = len(self)
        self.clear()
        gc.collect()
        return count


def _closed(connection: Any) -> bool:
    if isinstance(connection, sqlite3.Connection):
        try:
            connection.total_changes  # noqa: B018 - any use of a closed connection raises
        except sqlite3.ProgrammingError:
            return True
        return False
    return bool(connection.is_closed())


@pytest.fixture(autouse=True)
def connections(monkeypatch: pytest.MonkeyPatch) -> Iterator[Connections]:
    """Fail a test that leaves a database connection open (in this process); the list of those it opened.

    Python 3.13's sqlite3 (and asyncpg) warn when the garbage collector finds an open connection, in
    whichever test it happens to run: recording each one points at the test, and the code, that left it.
    """
    opened = Connections()
    sqlite_connect = sqlite3.connect

    def recorded_sqlite(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = sqlite_connect(*args, **kwargs)
        opened.append(connection)
        return connection

    monkeypatch.setattr(sqlite3, "connect", recorded_sqlite)
    try:
        import asyncpg.connection
    except ImportError:
        pass
    else:
        asyncpg_connect = asyncpg.connection.connect

        async def recorded_asyncpg(*args: Any, **kwargs: Any) -> Any:
            connection = await asyncpg_connect(*args, **kwargs)
            opened.append(connection)
            return connection

        monkeypatch.setattr(asyncpg, "connect", recorded_asyncpg)  # the registry, a store's LISTEN connection
        monkeypatch.setattr(asyncpg.connection, "connect", recorded_asyncpg)  # what asyncpg's pools call
    yield opened
    left = opened.still_open()
    for connection in left:  # best effort, so the warning does not fail whichever test collects them next
        with contextlib.suppress(Exception):
            if isinstance(connection, sqlite3.Connection):
                connection.close()
            else:
                connection.terminate()
    assert not left, f"the test left database connections open: {left}"


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
def postgres_url(postgres_server, request) -> Iterator[str]:
    """A fresh, empty database on the session's server, for this test."""
    import re

    name = "t_" + re.sub(r"\W", "_", request.node.name)[-40:].lower() + f"_{os.getpid()}_{id(request) % 10_000}"
    postgres_server.psql(f"CREATE DATABASE {name} OWNER {postgres_server_user()}")
    yield postgres_server.url(name)
    # Dropped here, not left to the session's end: a few hundred databases (about 25,000 files) were all
    # removed in the last test's teardown, which a loaded run was still doing when that test reached
    # 110 s (its timeout is 120 s). A test that stopped the server has nothing left to drop.
    with contextlib.suppress(Exception):
        postgres_server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", timeout=30)


def postgres_server_user() -> str:
    from tests import pg

    return pg.USER
