"""Tests for routines on the main loop (`pool._worker._overrun`): the guard, and the watch thread that answers for the loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from pool._worker._overrun import OVERRUN_S, Guard, Here, Watch, task_factory, unlocked


def _held(guard: Guard) -> bool:
    if guard.lock.acquire(blocking=False):
        guard.lock.release()
        return False
    return True


async def test_unlocked_should_release_the_guard_only_while_the_user_code_steps():
    """Test that each step of the awaited coroutine runs without the guard, and the awaiting code with it."""
    guard = Guard()
    seen = []

    async def user() -> str:
        seen.append((_held(guard), guard.since > 0))
        await asyncio.sleep(0)
        seen.append((_held(guard), guard.since > 0))
        return "done"

    assert await unlocked(guard, user()) == "done"
    assert seen == [(False, True), (False, True)]
    assert _held(guard) and guard.since == 0.0


async def test_unlocked_should_pass_exceptions_and_cancellation_through_with_the_guard_held_again():
    """Test that what the user code raises, and a cancellation thrown into it, arrive as they would unwrapped."""
    guard = Guard()

    async def fails() -> None:
        await asyncio.sleep(0)
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await unlocked(guard, fails())
    assert _held(guard)

    cancelled = []

    async def waits() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(_held(guard))
            raise

    task = asyncio.ensure_future(unlocked(guard, waits()))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [False] and _held(guard)


async def test_a_task_started_by_user_code_should_run_unlocked_and_ours_should_not():
    """Test the task factory: a task made inside user code steps without the guard; one made outside keeps it."""
    guard = Guard()
    loop = asyncio.get_running_loop()
    loop.set_task_factory(task_factory(guard))
    try:

        async def probe() -> bool:
            return _held(guard)

        async def user() -> bool:
            return await asyncio.ensure_future(probe())

        assert await unlocked(guard, user()) is False  # started in user code: runs unlocked
        assert await asyncio.ensure_future(probe()) is True  # started by us: holds the guard
    finally:
        loop.set_task_factory(None)


async def test_here_should_run_at_once_on_the_loop_and_queue_from_the_watch():
    guard = Guard()
    loop = asyncio.get_running_loop()
    here = Here(loop, guard)
    ran: list[str] = []
    here.post(ran.append, "now")
    assert ran == ["now"]
    guard.watch = threading.get_ident()  # as if this were the watch thread
    here.post(ran.append, "later")
    assert ran == ["now"]
    guard.watch = 0
    await asyncio.sleep(0)
    assert ran == ["now", "later"]


async def test_the_watch_should_serve_while_user_code_overruns_and_park_when_idle():
    """Test that the watch serves (holding the guard) only while user code holds the loop, then parks."""
    guard = Guard()
    served = threading.Event()
    calls: list[bool] = []

    def serve() -> None:
        calls.append(threading.get_ident() == guard.watch and asyncio.get_running_loop() is loop)
        served.set()

    loop = asyncio.get_running_loop()
    watch = Watch(guard, loop, serve)
    watch.start()
    try:

        async def hog() -> None:
            assert served.wait(10)  # one step of user code holds the loop (the GIL free) until served

        started = time.monotonic()
        await unlocked(guard, hog())
        assert calls and all(calls)
        assert time.monotonic() - started >= OVERRUN_S
        assert _held(guard) and guard.since == 0.0
        count = len(calls)
        await asyncio.sleep(OVERRUN_S * 5)  # nothing overruns now: no more serving (bounded, nothing to wait on)
        assert len(calls) == count
    finally:
        watch.stop()
