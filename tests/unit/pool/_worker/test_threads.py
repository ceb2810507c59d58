"""Tests for pool._worker._threads: a loop on a thread of its own, and the hop that batches callbacks onto a loop.

Real threads and real loops; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from pool._worker._threads import Hop, LoopThread, new_event_loop

WAIT_S = 5.0


@pytest.fixture
def loop_thread():
    thread = LoopThread("test-loop")
    thread.start()
    try:
        yield thread
    finally:
        thread.stop()


def _drained(hop: Hop) -> threading.Event:
    """An event set once every callback posted so far to ``hop`` has run."""
    done = threading.Event()
    hop.post(done.set)
    return done


class TestNewEventLoop:
    def test_new_event_loop_should_be_uvloop_where_it_is_installed(self):
        """Test that a worker's loops are uvloop's (a default dependency)."""
        import uvloop

        loop = new_event_loop()
        try:
            assert isinstance(loop, uvloop.Loop)
        finally:
            loop.close()


class TestHop:
    def test_post_should_run_callbacks_on_the_loop_thread_in_order(self, loop_thread):
        """Test that callbacks posted from here run on the loop's thread, in the order posted, with their args."""
        ran: list[tuple[int, str]] = []
        for i in range(100):
            loop_thread.hop.post(lambda i, name: ran.append((i, name)), i, threading.current_thread().name)
        assert _drained(loop_thread.hop).wait(WAIT_S)
        assert [i for i, _ in ran] == list(range(100))
        where: list[str] = []
        loop_thread.hop.post(lambda: where.append(threading.current_thread().name))
        assert _drained(loop_thread.hop).wait(WAIT_S)
        assert where == ["test-loop"]

    async def test_post_should_wake_the_loop_once_per_batch(self):
        """Test that callbacks posted before the loop drains share one wake-up (one call_soon_threadsafe)."""
        loop = asyncio.get_running_loop()
        wakes = 0
        real = loop.call_soon_threadsafe

        class Counting:
            def call_soon_threadsafe(self, fn, *args):
                nonlocal wakes
                wakes += 1
                return real(fn, *args)

        hop = Hop(Counting())  # type: ignore[arg-type]
        ran: list[int] = []
        for i in range(10):
            hop.post(ran.append, i)
        assert wakes == 1 and ran == []
        await asyncio.sleep(0)
        assert ran == list(range(10))
        hop.post(ran.append, 10)  # drained: the next post wakes the loop again
        assert wakes == 2
        await asyncio.sleep(0)
        assert ran[-1] == 10

    async def test_post_should_run_the_rest_when_one_callback_raises(self, caplog):
        """Test that one failing callback is logged and the batch goes on."""
        hop = Hop(asyncio.get_running_loop())
        ran: list[int] = []

        def boom() -> None:
            raise RuntimeError("boom")

        hop.post(ran.append, 1)
        hop.post(boom)
        hop.post(ran.append, 2)
        with caplog.at_level(logging.ERROR, logger="leakypool.worker"):
            await asyncio.sleep(0)
        assert ran == [1, 2]
        assert "failed" in caplog.text and "boom" in caplog.text

    def test_post_should_drop_callbacks_when_the_loop_is_closed(self):
        """Test that posting to a closed loop (the worker exiting) neither raises nor runs anything."""
        loop = new_event_loop()
        loop.close()
        hop = Hop(loop)
        ran: list[int] = []
        hop.post(ran.append, 1)
        assert ran == []


class TestLoopThread:
    def test_stop_should_cancel_pending_tasks_end_the_thread_and_close_the_loop(self):
        """Test that stop ends the loop's thread, cancels what still runs there, and closes the loop."""
        thread = LoopThread("test-stop")
        thread.start()
        started, cancelled = threading.Event(), threading.Event()

        async def forever() -> None:
            started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.set()
                raise

        asyncio.run_coroutine_threadsafe(forever(), thread.loop)
        assert started.wait(WAIT_S)
        thread.stop(WAIT_S)
        assert cancelled.is_set()
        assert not thread._thread.is_alive()
        assert thread.loop.is_closed()

    def test_stop_should_do_nothing_when_never_started(self):
        """Test that stopping a thread that never started returns at once (its loop is left to the caller)."""
        thread = LoopThread("never")
        thread.stop()
        assert not thread._thread.is_alive()
        thread.loop.close()

    def test_loop_should_run_coroutines_submitted_from_another_thread(self, loop_thread):
        """Test the worker's use: a routine's coroutine runs on the thread's loop and its result comes back."""

        async def where() -> str:
            await asyncio.sleep(0)
            return threading.current_thread().name

        assert asyncio.run_coroutine_threadsafe(where(), loop_thread.loop).result(WAIT_S) == "test-loop"
