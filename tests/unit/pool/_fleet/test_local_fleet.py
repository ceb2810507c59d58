"""Tests for pool._fleet._local_fleet: start, crash replacement, retirement, growth and idling out, stop.

The workers are short ``python -c`` scripts, not ``worker_main``: a fake
template (`FleetTemplate`, after test_local_worker's `ScriptTemplate`)
forks them where the fleet's `LocalWorker` asks its template for a worker,
so the READY pipes, the exits and the reaping are real, and what is tested
is the fleet's own bookkeeping: who is replaced, when, and counted how.
Every wait is on a callback the fleet makes (``on_ready``, ``on_exit``,
``changed``), bounded by `WAIT_S`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import signal
import stat
import tempfile
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from pool._base._exit import EXIT_RETIRED
from pool._errors import WorkerInitError, WorkerStartError
from pool._fleet import _local_fleet
from pool._fleet._local_fleet import LocalFleet, socket_directory
from pool._transport import _wire
from pool._transport._rpc import WorkerMetadata
from tests.unit.pool._fleet.test_local_worker import PRELUDE, ScriptTemplate

WAIT_S = 30.0
"""Bound on every wait (a ``python -c`` child starts in tens of milliseconds; this is for a loaded machine)."""

READY = """
info = {"pid": os.getpid(), "tags": []}
if os.environ.get("LEAKYPOOL_UNIX_SOCKET"):
    info["unix_socket"] = os.environ["LEAKYPOOL_UNIX_SOCKET"]
else:
    info["port"] = 1
if "LEAKYPOOL_IDLE_TIMEOUT" in os.environ:
    info["tags"].append("elastic")
if "LEAKYPOOL_INITIALIZER_FILE" in os.environ:
    with open(os.environ["LEAKYPOOL_INITIALIZER_FILE"], "rb") as f:
        info["tags"].append("initializer=" + f.read().decode())
say("READY " + json.dumps(info))
"""
"""The READY line a worker sends, with tags telling what the fleet gave it (grown, an initializer)."""

SERVE = READY + "wait_for_the_pool()"
EXIT_BEFORE_READY = "sys.exit(3)"
GROWN_IDLE_OUT = READY + 'if "LEAKYPOOL_IDLE_TIMEOUT" in os.environ:\n    sys.exit(0)\nwait_for_the_pool()'
"""Kept workers serve; a grown one idles out at once (exit 0, as after its idle timeout)."""
RECYCLED = (
    "import signal\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
    + READY
    + f'signal.sigwait({{signal.SIGUSR1}})\nsay("RETIRING max tasks")\nsys.exit({EXIT_RETIRED})'
)
"""Serves until told (SIGUSR1, standing for the call that reaches its limit), then recycles itself."""
INITFAIL = "say('INITFAIL ' + {!r})\nsys.exit(4)".format(
    json.dumps(
        {
            "error": base64.b64encode(_wire.pack_exception(KeyError("x"), "the initializer")[0]).decode(),
            "traceback": "Traceback...\nKeyError: 'x'",
        }
    )
)


class FleetTemplate(ScriptTemplate):
    """A fake `WorkerTemplate` whose forks run ``scripts`` in turn (the last one for every fork after)."""

    def __init__(self, *scripts: str) -> None:
        super().__init__(scripts[0])
        self.scripts = list(scripts)
        self.exit_status: int | None = None  # as a real template's: set once it closed

    async def fork(self, env: Mapping[str, str], fds: tuple[int, int]) -> int:
        self.script = PRELUDE + (self.scripts.pop(0) if len(self.scripts) > 1 else self.scripts[0])
        return await super().fork(env, fds)

    async def aclose(self) -> None:
        """What the fleet calls on stop: every child is gone by then; reap any left."""
        self.reap()
        self.exit_status = 0


class Events:
    """The fleet's callbacks, in order: ``("ready", metadata)``, ``("exit", uid, reason)``, ``("changed",)``."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()

    def ready(self, metadata: WorkerMetadata) -> None:
        self.queue.put_nowait(("ready", metadata))

    def exit(self, uid: uuid.UUID, reason: str) -> None:
        self.queue.put_nowait(("exit", uid, reason))

    def changed(self) -> None:
        self.queue.put_nowait(("changed",))

    async def next(self, kind: str | None = None) -> tuple[Any, ...]:
        """The next event (of ``kind``, skipping others)."""
        async with asyncio.timeout(WAIT_S):
            while True:
                event = await self.queue.get()
                if kind is None or event[0] == kind:
                    return event


@contextlib.asynccontextmanager
async def fleet_of(
    template: FleetTemplate, *, minimum: int = 1, maximum: int = 1, start: bool = True, **kwargs: Any
) -> AsyncIterator[tuple[LocalFleet, Events]]:
    """A fleet whose workers the fake ``template`` forks; stopped (and every child reaped) after."""
    events = Events()
    fleet = LocalFleet(
        env={"LEAKYPOOL_SETTING": "1"},
        minimum=minimum,
        maximum=maximum,
        idle_timeout=5.0,
        startup_timeout=WAIT_S,
        shutdown_grace=5.0,
        on_ready=events.ready,
        on_exit=events.exit,
        template=False,  # no real template: the fake one below forks
        **kwargs,
    )
    fleet._template = template  # type: ignore[assignment] - the fake stands in for WorkerTemplate
    fleet.changed = events.changed
    try:
        if start:
            await fleet.start()
        yield fleet, events
    finally:
        await asyncio.wait_for(fleet.stop(), WAIT_S)
        template.reap()


class TestStart:
    async def test_start_should_bring_up_minimum_workers_on_private_sockets_and_stop_should_reap_them(self):
        """Test that start waits for ``minimum`` workers, each on a unix socket in one 0700 directory, and that
        stop ends and reaps them all and removes the directory."""
        template = FleetTemplate(SERVE)
        async with fleet_of(template, minimum=3, maximum=3) as (fleet, events):
            ready = [(await events.next("ready"))[1] for _ in range(3)]
            assert len(fleet) == 3 and sorted(fleet.pids) == sorted(m.pid for m in ready)
            assert all(m.uid in fleet for m in ready) and not any("elastic" in m.tags for m in ready)
            directories = {os.path.dirname(m.address.removeprefix("unix:")) for m in ready}
            (directory,) = directories
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
            assert {os.path.basename(m.address) for m in ready} == {f"{m.uid}.sock" for m in ready}
            await fleet.stop()
            assert len(fleet) == 0 and fleet.pids == [] and not os.path.exists(directory)
            assert {child.returncode for child in template.children} == {-signal.SIGTERM}
            assert events.queue.empty()  # stopping is not an exit the pool must act on

    async def test_start_should_raise_when_a_worker_exits_before_it_is_ready(self):
        async with fleet_of(FleetTemplate(SERVE, EXIT_BEFORE_READY), minimum=2, maximum=2, start=False) as (fleet, _):
            with pytest.raises(WorkerStartError, match="exited with status 3 before it was ready"):
                await fleet.start()
            assert fleet.init_error is None and len(fleet) == 1  # the other one came up (stop ends it)

    async def test_an_initializer_failure_should_fail_start_and_say_why_no_worker_can_come(self):
        """Test that a worker whose initializer raised fails start with `WorkerInitError`, kept as
        ``init_error``; with no worker left, `stranded` hands out a fresh copy and nothing counts as arriving."""
        async with fleet_of(FleetTemplate(INITFAIL), start=False) as (fleet, events):
            with pytest.raises(WorkerInitError, match="its initializer raised KeyError: 'x'"):
                await fleet.start()
            assert fleet.init_error is not None and len(fleet) == 0
            assert await events.next() == ("changed",)
            stranded = fleet.stranded()
            assert stranded is not None and stranded is not fleet.init_error
            assert (stranded.args, stranded.traceback) == (fleet.init_error.args, fleet.init_error.traceback)
            assert fleet.arriving == 0 and not fleet.coming({uuid.uuid4()})

    async def test_an_initializer_should_reach_each_worker_through_a_file_in_the_private_directory(self):
        template = FleetTemplate(SERVE)
        async with fleet_of(template, transport="tcp", initializer=b"pickled") as (_, events):
            (_, metadata) = await events.next("ready")
            assert metadata.tags == {"initializer=pickled"} and metadata.address == "127.0.0.1:1"

    async def test_a_tcp_fleet_without_an_initializer_should_make_no_socket_directory(self):
        async with fleet_of(FleetTemplate(SERVE), transport="tcp") as (fleet, events):
            (_, metadata) = await events.next("ready")
            assert metadata.address == "127.0.0.1:1" and fleet._socket_dir is None


class TestCrashes:
    async def test_a_worker_that_dies_unasked_should_be_counted_and_replaced_after_the_back_off(self, monkeypatch):
        """Test that a kept worker killed from outside is reported with its status, counted as a crash, owed
        while its back-off runs, and replaced by a new worker."""
        monkeypatch.setattr(_local_fleet, "RESPAWN_BACKOFF_S", (0.0, 2.0))  # owed for 2 s: read well within them
        async with fleet_of(FleetTemplate(SERVE)) as (fleet, events):
            (_, first) = await events.next("ready")
            fleet.replace(first.uid)  # broken: killed, as for a crash
            assert await events.next() == ("exit", first.uid, f"exited with status {-signal.SIGKILL}")
            assert fleet.crashes == 1 and fleet.owed == 1 and len(fleet) == 0
            assert fleet.recycled == {}
            (_, second) = await events.next("ready")
            assert second.uid != first.uid and fleet.owed == 0 and len(fleet) == 1

    async def test_hurry_should_end_a_running_back_off_and_skip_the_next_ones(self, monkeypatch):
        """Test an executor shutting down with calls to run: a replacement owed after a long back-off starts at
        once when told to hurry, and so does the next one."""
        monkeypatch.setattr(_local_fleet, "RESPAWN_BACKOFF_S", (3600.0,))  # without hurry: an hour
        async with fleet_of(FleetTemplate(SERVE)) as (fleet, events):
            (_, first) = await events.next("ready")
            fleet.replace(first.uid)
            assert await events.next() == ("exit", first.uid, f"exited with status {-signal.SIGKILL}")
            assert fleet.owed == 1
            fleet.hurry()
            (_, second) = await events.next("ready")
            fleet.replace(second.uid)
            assert await events.next() == ("exit", second.uid, f"exited with status {-signal.SIGKILL}")
            (_, third) = await events.next("ready")
            assert len({first.uid, second.uid, third.uid}) == 3 and fleet.owed == 0

    async def test_a_replacement_that_fails_to_start_should_be_retried_until_one_comes_up(self, monkeypatch):
        monkeypatch.setattr(_local_fleet, "RESPAWN_BACKOFF_S", (0.0, 0.01, 0.02))  # quick timing
        async with fleet_of(FleetTemplate(SERVE, EXIT_BEFORE_READY, EXIT_BEFORE_READY, SERVE)) as (fleet, events):
            (_, first) = await events.next("ready")
            fleet.replace(first.uid)
            (_, second) = await events.next("ready")
            assert second.uid != first.uid and len(fleet) == 1
            assert fleet.crashes == 1 and fleet.owed == 0  # one death; the failed starts were retries of it


class TestRetire:
    async def test_retire_should_replace_the_worker_at_once_without_counting_a_crash(self):
        """Test that a worker the pool kills on purpose is told to the pool at once, counted under its reason,
        arriving until its replacement is up, and never counted as a crash; a second retire is refused."""
        async with fleet_of(FleetTemplate(SERVE)) as (fleet, events):
            (_, first) = await events.next("ready")
            assert fleet.retire(first.uid, "timeout")
            assert await events.next() == ("exit", first.uid, "retiring on purpose (timeout)")
            assert (fleet.recycled, fleet.arriving) == ({"timeout": 1}, 1)
            assert fleet.coming(set())
            assert not fleet.retire(first.uid, "timeout")  # replaced already
            assert not fleet.retire(uuid.uuid4())  # not ours
            rest = [await events.next() for _ in range(3)]
            (_, second) = next(e for e in rest if e[0] == "ready")
            assert ("exit", first.uid, f"exited on purpose (timeout, status {-signal.SIGKILL})") in rest
            assert ("changed",) in rest
            assert second.uid != first.uid and fleet.arriving == 0
            assert (fleet.crashes, fleet.owed, fleet.recycled) == (0, 0, {"timeout": 1})

    async def test_a_worker_that_recycles_itself_should_be_replaced_under_its_own_reason(self):
        """Test a worker that says RETIRING and exits with `EXIT_RETIRED`: replaced, counted under the reason
        it gave, not a crash."""
        async with fleet_of(FleetTemplate(RECYCLED, SERVE)) as (fleet, events):
            (_, first) = await events.next("ready")
            os.kill(first.pid, signal.SIGUSR1)  # its last call ended
            assert await events.next("exit") == ("exit", first.uid, "retiring on purpose (max tasks)")
            assert await events.next("exit") == (
                "exit",
                first.uid,
                f"exited on purpose (max tasks, status {EXIT_RETIRED})",
            )
            (_, second) = await events.next("ready")
            assert second.uid != first.uid
            assert (fleet.crashes, fleet.recycled) == (0, {"max tasks": 1})


class TestGrow:
    async def test_grow_should_add_one_elastic_worker_up_to_maximum_that_is_not_replaced_when_it_idles_out(self):
        """Test growth: one worker at a time, with an idle timeout; at ``maximum`` no more; a grown worker
        that exits 0 (idled out) is counted as shrunk and not replaced."""
        async with fleet_of(FleetTemplate(GROWN_IDLE_OUT), minimum=1, maximum=2) as (fleet, events):
            await events.next("ready")
            assert fleet.grow()
            assert not fleet.grow()  # one start at a time
            (_, grown) = await events.next("ready")
            assert "elastic" in grown.tags
            assert await events.next("exit") == ("exit", grown.uid, "left after idling (grown under load)")
            assert (fleet.grown, fleet.shrunk, fleet.crashes, len(fleet)) == (1, 1, 0, 1)

    async def test_grow_should_refuse_at_maximum_and_when_the_fleet_is_not_open(self):
        async with fleet_of(FleetTemplate(SERVE), minimum=1, maximum=1, start=False) as (fleet, events):
            assert not fleet.grow()  # not started
            await fleet.start()
            await events.next("ready")
            assert not fleet.grow()  # at maximum

    async def test_a_grow_that_fails_should_wait_out_the_back_off_before_trying_again(self):
        """Test that a failed growth is logged and the next `grow` is refused for `GROW_BACKOFF_S`."""
        logged = asyncio.Event()
        handler = _EventHandler(logged)
        _local_fleet._log.addHandler(handler)
        try:
            async with fleet_of(FleetTemplate(SERVE, EXIT_BEFORE_READY, SERVE), maximum=2) as (fleet, _):
                assert fleet.grow()
                await asyncio.wait_for(logged.wait(), WAIT_S)
                assert fleet.grown == 0 and len(fleet) == 1
                assert not fleet.grow()  # GROW_BACKOFF_S (5 s) not over
        finally:
            _local_fleet._log.removeHandler(handler)


class _EventHandler(logging.Handler):
    """Sets ``event`` when the fleet logs that it could not grow."""

    def __init__(self, event: asyncio.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if "could not grow" in record.getMessage():
            self.event.set()


class TestSocketDirectory:
    def test_socket_directory_should_be_private_and_fall_back_to_tmp_when_tmpdir_is_long(self, monkeypatch, tmp_path):
        """Test the directory for the sockets: mode 0700 under TMPDIR, or under /tmp when TMPDIR is too long
        for a socket path."""
        short_base = tempfile.mkdtemp(prefix="s", dir="/tmp")  # a short TMPDIR, as most are
        long_base = tmp_path / ("x" * 50)
        long_base.mkdir()
        made = []
        try:
            monkeypatch.setattr(tempfile, "tempdir", short_base)
            made.append(socket_directory())
            monkeypatch.setattr(tempfile, "tempdir", str(long_base))
            made.append(socket_directory())
            assert [os.path.dirname(d) for d in made] == [short_base, "/tmp"]
            assert all(os.path.basename(d).startswith("leakypool-") for d in made)
            assert {stat.S_IMODE(os.stat(d).st_mode) for d in made} == {0o700}
        finally:
            for directory in [*made, short_base]:
                os.rmdir(directory)
