"""Tests for pool._base._tasks: a TaskOwner starts tasks, logs their crashes, and ends them on aclose."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pool._base._tasks import TaskOwner

log = logging.getLogger("tests.unit.tasks")


class TestTaskOwner:
    async def test_spawn_should_run_the_coroutine_and_forget_the_task_once_done(self):
        """Test that a task runs, is counted while it runs, and is dropped when it ends."""
        owner, release = TaskOwner("owner", log), asyncio.Event()

        async def work():
            await release.wait()
            return 7

        task = owner.spawn(work(), name="work")
        assert task.get_name() == "work" and len(owner) == 1
        assert "[1 running]" in repr(owner)
        release.set()
        assert await asyncio.wait_for(task, 5) == 7
        assert len(owner) == 0
        await owner.aclose()

    async def test_spawn_should_log_a_crash_with_its_traceback_when_the_task_raises(self, caplog):
        """Test that a background task's exception is logged the moment it happens, naming owner and task."""
        owner = TaskOwner("pool p", log)

        async def crash():
            raise ValueError("boom")

        with caplog.at_level(logging.ERROR, logger=log.name):
            task = owner.spawn(crash(), name="crasher")
            await asyncio.wait((task,), timeout=5)
            await asyncio.sleep(0)  # the done callback runs on the loop's next turn
        (record,) = caplog.records
        assert record.getMessage() == "pool p: background task crasher crashed"
        assert isinstance(record.exc_info[1], ValueError)
        assert len(owner) == 0
        await owner.aclose()

    async def test_spawn_should_not_log_when_a_task_is_cancelled(self, caplog):
        """Test that cancellation is an ordinary end, not a crash."""
        owner = TaskOwner("owner", log)
        with caplog.at_level(logging.ERROR, logger=log.name):
            task = owner.spawn(asyncio.Event().wait())
            await asyncio.sleep(0)
            task.cancel()
            await asyncio.wait((task,), timeout=5)
            await asyncio.sleep(0)
        assert caplog.records == [] and len(owner) == 0
        await owner.aclose()

    async def test_aclose_should_cancel_running_tasks_and_wait_for_them_to_unwind(self):
        """Test that aclose cancels what still runs and returns only once each task's cleanup ran."""
        owner, unwound = TaskOwner("owner", log), []

        async def forever(i):
            try:
                await asyncio.Event().wait()
            finally:
                await asyncio.sleep(0)  # cleanup that itself awaits
                unwound.append(i)

        tasks = [owner.spawn(forever(i)) for i in range(3)]
        await asyncio.sleep(0)
        await asyncio.wait_for(owner.aclose(), 5)
        assert sorted(unwound) == [0, 1, 2] and all(t.cancelled() for t in tasks)
        assert len(owner) == 0 and owner.closed

    async def test_spawn_should_refuse_when_a_cancelled_task_spawns_while_closing(self):
        """Test that a task's cleanup cannot start a new task once aclose began (the owner is closed before
        the first cancel), so nothing outlives aclose."""
        owner, started = TaskOwner("owner", log), []

        async def spawns_on_exit():
            try:
                await asyncio.Event().wait()
            finally:
                try:
                    started.append(owner.spawn(asyncio.Event().wait()))
                except RuntimeError:
                    started.append(None)

        owner.spawn(spawns_on_exit())
        await asyncio.sleep(0)
        await asyncio.wait_for(owner.aclose(), 5)
        assert started == [None]
        assert len(owner) == 0

    async def test_spawn_should_refuse_and_close_the_coroutine_when_the_owner_is_closed(self):
        """Test that nothing starts after aclose, and the coroutine is closed (no "never awaited" warning)."""
        owner = TaskOwner("worker service", log)
        await owner.aclose()

        async def work():
            return 1

        coro = work()
        with pytest.raises(RuntimeError, match=r"^worker service is closed; cannot start 'late'$"):
            owner.spawn(coro, name="late")
        assert coro.cr_frame is None  # closed: it will never run

    async def test_aclose_should_log_and_return_when_a_task_ignores_cancellation(self, caplog):
        """Test that aclose waits at most ``timeout`` for a task that will not end, then says so."""
        owner, stop = TaskOwner("owner", log), asyncio.Event()

        async def stubborn():
            while not stop.is_set():
                try:
                    await stop.wait()
                except asyncio.CancelledError:
                    continue

        task = owner.spawn(stubborn(), name="stubborn")
        await asyncio.sleep(0)
        with caplog.at_level(logging.ERROR, logger=log.name):
            await asyncio.wait_for(owner.aclose(timeout=0.05), 5)
        assert "owner: 1 task(s) ignored cancellation" in caplog.text
        assert not task.done()
        stop.set()
        await asyncio.wait_for(task, 5)
