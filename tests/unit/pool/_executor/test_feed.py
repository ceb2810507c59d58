"""Tests for pool._executor._feed: the executor's waiting line, its window of calls in flight, and how futures end.

A real `Feed` on the test's loop, its runners owned by a real `TaskOwner`; the pool it feeds is a fake whose
``call`` answers what the test scripts (and can hold calls until the test releases them). The behaviours with
real workers are in tests/integration/executor/test_executor.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import logging
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from pool._base._tasks import TaskOwner
from pool._errors import NoWorkersAvailable, PoolClosed, SerializationError, WorkerBroken
from pool._executor._feed import Feed, FeedExecutor, PoolExecutor
from tests.integration.support.helpers import eventually

WAIT_S = 5.0


class Pool:
    """What a Feed hands calls to: ``call`` answers ``(True, name)`` unless ``answers`` says otherwise.

    ``answers[name]``: a list of what successive calls of that task get (an exception is raised, anything
    else returned as the call's outcome). With ``hold``, every call waits for `release` first. A call whose
    name is in ``begin`` begins at once (its worker's word: `Task.started`); the others only as they end.
    ``cancelled``: the calls cancelled while they waited.
    """

    def __init__(
        self, *, workers: int = 1, hold: bool = False, begin: tuple[str, ...] = (), abort: tuple[str, ...] = ()
    ) -> None:
        self.begin = begin
        self.abort = abort  # these calls, cancelled, wait for their callee's word as `OutgoingCall.abort` does
        self.aborting = asyncio.Event()
        self.cancelled: list[str] = []
        self.tasks = TaskOwner("test pool", logging.getLogger("test"))
        self.open = True
        self.workers = workers
        self.answers: dict[str, list[Any]] = {}
        self.released = asyncio.Event()
        if not hold:
            self.released.set()
        self.calls: list[str] = []
        self.running = 0
        self.most = 0

    async def call(self, task: Any) -> tuple[bool, Any]:
        self.calls.append(task.name)
        self.running += 1
        self.most = max(self.most, self.running)
        if task.name in self.begin:
            task.started()
        try:
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                self.cancelled.append(task.name)
                if task.name in self.abort:  # (until a second cancel)
                    self.aborting.set()
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.Event().wait()
                raise
            script = self.answers.get(task.name)
            answer = script.pop(0) if script else (True, task.name)
            if isinstance(answer, BaseException):
                raise answer
            return answer
        finally:
            self.running -= 1

    def release(self) -> None:
        self.released.set()

    def attach(self, feed: Feed, *, per_worker: int = 2) -> None:
        feed.attach(
            self.call,
            self.tasks.spawn,
            is_open=lambda: self.open,
            workers=lambda: self.workers,
            per_worker=per_worker,
        )


def put(feed: Feed, *names: str) -> list[cf.Future[Any]]:
    futures = []
    for name in names:
        future: cf.Future[Any] = cf.Future()
        feed.put(future, SimpleNamespace(name=name))  # type: ignore[arg-type]  # (the fake pool reads only its name)
        futures.append(future)
    return futures


async def outcomes(futures: list[cf.Future[Any]]) -> list[Any]:
    """Each future's result, or its exception (a cancelled one: "cancelled")."""
    # (wrap_future, not cf.wait: a future cancelled in line is done for its callbacks, never for cf.wait,
    # as in the standard library's executors)
    await asyncio.wait_for(asyncio.gather(*map(asyncio.wrap_future, futures), return_exceptions=True), WAIT_S)
    return ["cancelled" if f.cancelled() else (f.exception(timeout=0) or f.result(timeout=0)) for f in futures]


async def closed(pool: Pool) -> None:
    await pool.tasks.aclose()


class TestFeed:
    async def test_put_should_keep_work_until_attached_then_hand_it_to_the_pool_in_order(self):
        """Test that work accepted before the pool started waits in line, then runs, first in first out."""
        feed, pool = Feed(), Pool()
        try:
            futures = put(feed, "a", "b", "c")
            assert (feed.attached, feed.counts()) == (False, (3, 0))
            pool.attach(feed)
            assert feed.attached and feed.on_loop()
            assert await outcomes(futures) == ["a", "b", "c"]
            assert pool.calls == ["a", "b", "c"] and feed.counts() == (0, 0)
        finally:
            await closed(pool)

    @pytest.mark.parametrize(("workers", "per_worker", "window"), [(1, 2, 2), (3, 2, 6), (2, 1, 4), (0, 3, 3)])
    async def test_feed_should_hand_at_most_a_window_of_calls_to_the_pool_at_once(self, workers, per_worker, window):
        """Test the window: per_worker (at least 2) calls per worker (at least 1) in flight; the rest wait here,
        still cancellable."""
        feed, pool = Feed(), Pool(workers=workers, hold=True, begin=("c0",))
        try:
            pool.attach(feed, per_worker=per_worker)
            futures = put(feed, *(f"c{i}" for i in range(10)))
            await eventually(lambda: pool.running == window, timeout=WAIT_S, interval=0.001)
            assert feed.counts() == (10 - window, window)
            assert not futures[0].cancel() and futures[-1].cancel()  # begun on a worker / still in line
            pool.release()
            results = await outcomes(futures)
            assert results == [f"c{i}" for i in range(9)] + ["cancelled"]
            assert pool.most == window and "c9" not in pool.calls
        finally:
            await closed(pool)

    async def test_direct_should_hand_every_call_at_once_and_end_a_refused_one_with_the_refusal(self):
        """Test a feed without a window: the pool's own admission decides, and a NoWorkersAvailable is the outcome."""
        feed, pool = Feed(direct=True), Pool(hold=True)
        refusal = NoWorkersAvailable("no queue and no worker")
        pool.answers["refused"] = [refusal]
        try:
            pool.attach(feed)
            futures = put(feed, *(f"c{i}" for i in range(9)), "refused")
            await eventually(lambda: pool.running == 10, timeout=WAIT_S, interval=0.001)
            pool.release()
            assert await outcomes(futures) == [f"c{i}" for i in range(9)] + [refusal]
        finally:
            await closed(pool)

    async def test_feed_should_offer_a_call_again_when_no_worker_took_it_without_a_direct_feed(self):
        """Test that a view over a pool with no queue waits here for room instead of failing the future."""
        feed, pool = Feed(), Pool()
        pool.answers["f"] = [NoWorkersAvailable("busy"), NoWorkersAvailable("busy"), (True, 42)]
        try:
            pool.attach(feed)
            assert await outcomes(put(feed, "f")) == [42]
            assert pool.calls == ["f", "f", "f"]
        finally:
            await closed(pool)

    async def test_feed_should_end_each_future_with_its_calls_outcome(self):
        """Test that what the function raised (a BaseException too) and what the pool raised end the future."""
        feed, pool = Feed(), Pool()
        raised, lost = SystemExit(3), WorkerBroken("worker w: lost")
        pool.answers = {"ok": [(True, None)], "raised": [(False, raised)], "lost": [lost]}
        try:
            pool.attach(feed)
            futures = put(feed, "ok", "raised", "lost")
            assert await outcomes(futures) == [None, raised, lost]
        finally:
            await closed(pool)

    async def test_put_should_raise_pool_closed_when_the_pool_it_feeds_has_closed(self):
        """Test that an attached feed refuses new work once its pool is closed, and keeps none of it."""
        feed, pool = Feed(), Pool()
        try:
            pool.attach(feed)
            pool.open = False
            with pytest.raises(PoolClosed, match="the pool is closed"):
                put(feed, "f")
            assert feed.counts() == (0, 0)
        finally:
            await closed(pool)

    async def test_attach_should_fail_the_waiting_work_when_the_pool_closed_before_it(self):
        """Test that work waiting for a pool that closed before taking it ends in PoolClosed, not in a hang."""
        feed, pool = Feed(), Pool()
        try:
            futures = put(feed, "a", "b")
            pool.open = False
            pool.attach(feed)
            results = await outcomes(futures)
            assert all(isinstance(r, PoolClosed) for r in results) and pool.calls == []
        finally:
            await closed(pool)

    async def test_attach_should_fail_the_waiting_work_when_the_pools_tasks_are_closing(self):
        """Test that a runner the pool can no longer start ends the work in PoolClosed."""
        feed, pool = Feed(), Pool()
        futures = put(feed, "a")
        await closed(pool)
        pool.attach(feed)
        (result,) = await outcomes(futures)
        assert isinstance(result, PoolClosed) and "before the call was handed to it" in str(result)

    async def test_closing_the_pool_should_end_calls_in_flight_and_those_in_line_with_pool_closed(self):
        """Test that the pool's tasks closing ends every accepted future: running and waiting ones alike."""
        feed, pool = Feed(), Pool(hold=True)
        pool.attach(feed)
        futures = put(feed, "a", "b", "c", "d")
        await eventually(lambda: pool.running == 2, timeout=WAIT_S, interval=0.001)
        await closed(pool)
        results = await outcomes(futures)
        assert [str(r) for r in results] == ["the pool closed before the call finished"] * 2 + [
            "the pool closed before the call was handed to it"
        ] * 2
        assert all(isinstance(r, PoolClosed) for r in results) and feed.counts() == (0, 0)

    async def test_fail_for_good_should_end_the_waiting_work_and_every_later_put(self):
        """Test a pool that never started: what waits and what comes later both end with its error."""
        feed = Feed()
        error = RuntimeError("the pool could not start")
        (first,) = put(feed, "a")
        feed.fail(error, for_good=True)
        (later,) = put(feed, "b")
        assert first.exception(timeout=0) is error and later.exception(timeout=0) is error
        assert feed.counts() == (0, 0)
        await asyncio.wait_for(feed.drained(), WAIT_S)

    async def test_cancel_pending_should_cancel_every_call_that_has_not_begun_on_a_worker(self):
        """Test shutdown(cancel_futures=True)'s half here (issue 53 item 5): work in line is cancelled, and so is a
        call handed to the pool that no worker began (its call is cancelled too); a call that began finishes."""
        feed, pool = Feed(), Pool(hold=True, begin=("a",))
        try:
            pool.attach(feed)
            futures = put(feed, "a", "b", "c")
            await eventually(lambda: pool.running == 2, timeout=WAIT_S, interval=0.001)
            assert [f.running() for f in futures] == [True, False, False]  # RUNNING once its worker said it began
            feed.cancel_pending()
            await eventually(lambda: pool.cancelled == ["b"], timeout=WAIT_S, interval=0.001)
            pool.release()
            assert await outcomes(futures) == ["a", "cancelled", "cancelled"]
            await asyncio.wait_for(feed.drained(), WAIT_S)
            assert feed.counts() == (0, 0)
        finally:
            await closed(pool)

    async def test_a_pool_closing_during_a_withdrawal_should_still_end_every_future(self):
        """Test a cancel whose withdrawal is still waiting for its callee when the pool closes (terminate_workers):
        the cancelled future's waiters are told, and the rest end in PoolClosed; nothing is left waiting."""
        feed, pool = Feed(), Pool(hold=True, abort=("a",))
        pool.attach(feed, per_worker=2)
        futures = put(feed, "a", "b", "c", "d")
        await eventually(lambda: pool.running == 2, timeout=WAIT_S, interval=0.001)
        assert futures[0].cancel()
        await asyncio.wait_for(pool.aborting.wait(), WAIT_S)
        pool.open = False
        await closed(pool)
        results = await outcomes(futures)
        assert results[0] == "cancelled" and all(isinstance(r, PoolClosed) for r in results[1:])
        assert cf.wait([futures[0]], timeout=0)[0] == {futures[0]}  # its waiters were told
        await asyncio.wait_for(feed.drained(), WAIT_S)

    async def test_a_finished_call_should_leave_no_reference_from_its_task_to_the_feed(self):
        """Test that the begin hook a call carries is dropped as it ends (a task -> work -> task cycle would keep
        its arguments until the garbage collector ran)."""
        feed, pool = Feed(), Pool()
        try:
            pool.attach(feed)
            task = SimpleNamespace(name="a")
            future: cf.Future[Any] = cf.Future()
            feed.put(future, task)  # type: ignore[arg-type]
            assert await outcomes([future]) == ["a"]
            await asyncio.wait_for(feed.drained(), WAIT_S)
            assert task.started is None
        finally:
            await closed(pool)

    async def test_cancel_pending_should_catch_a_work_leaving_the_line_as_it_runs(self):
        """Test shutdown(cancel_futures=True) reaching a work taken from the line but not yet handed to the pool."""
        feed, pool = Feed(), Pool(hold=True)
        try:
            feed.cancel_pending()  # as if it ran between a runner's taking the work and its handing it over
            pool.attach(feed)
            (future,) = put(feed, "a")
            assert await outcomes([future]) == ["cancelled"] and pool.calls == []
        finally:
            await closed(pool)

    async def test_cancelling_a_handed_future_should_take_its_call_back_until_its_worker_began_it(self):
        """Test that cancel() works on a future whose call waits in the pool or a worker's line (the call is
        cancelled there, the runner goes on to the next work), and not on one whose worker began it."""
        feed, pool = Feed(), Pool(hold=True, begin=("began",))
        try:
            pool.attach(feed, per_worker=2)
            began, waiting, after = put(feed, "began", "waiting", "after")
            await eventually(lambda: pool.running == 2, timeout=WAIT_S, interval=0.001)
            assert not began.cancel() and waiting.cancel()
            await eventually(lambda: pool.cancelled == ["waiting"], timeout=WAIT_S, interval=0.001)
            await eventually(lambda: "after" in pool.calls, timeout=WAIT_S, interval=0.001)  # the runner went on
            pool.release()
            assert await outcomes([began, waiting, after]) == ["began", "cancelled", "after"]
            done, _ = cf.wait([waiting], timeout=0)  # waiters were told of the cancel, as the standard library's are
            assert done == {waiting}
        finally:
            await closed(pool)

    async def test_put_from_another_thread_should_wake_the_loop(self):
        """Test that ``submit`` from any thread reaches a pool on its loop (call_soon_threadsafe)."""
        feed, pool = Feed(), Pool()
        futures: list[cf.Future[Any]] = []
        try:
            pool.attach(feed)
            thread = threading.Thread(target=lambda: futures.extend(put(feed, "from-a-thread")))
            thread.start()
            await asyncio.to_thread(thread.join, WAIT_S)
            assert await outcomes(futures) == ["from-a-thread"]
        finally:
            await closed(pool)

    async def test_drained_should_return_once_every_accepted_future_is_done(self):
        """Test the on-loop wait of a shutdown: it returns when the last accepted call ends, not before."""
        feed, pool = Feed(), Pool(hold=True)
        try:
            pool.attach(feed)
            futures = put(feed, "a", "b", "c")
            drained = asyncio.ensure_future(feed.drained())
            await eventually(lambda: pool.running == 2, timeout=WAIT_S, interval=0.001)
            assert not drained.done()
            pool.release()
            await asyncio.wait_for(drained, WAIT_S)
            assert all(f.done() for f in futures)
        finally:
            await closed(pool)


def unpicklable() -> threading.Lock:
    return threading.Lock()


class TestFeedExecutor:
    async def test_submit_should_fail_the_future_at_once_when_an_argument_cannot_be_pickled(self):
        """Test the standard library's contract: a bad argument fails its future, and nothing is queued."""
        executor = FeedExecutor(Feed())
        future = executor.submit(print, unpicklable())
        assert isinstance(future.exception(timeout=0), SerializationError)
        assert repr(executor) == "<FeedExecutor open [0 pending, 0 handed to the pool]>"
        executor.shutdown()

    async def test_shutdown_should_cancel_the_waiting_futures_and_refuse_new_work(self):
        """Test shutdown(cancel_futures=True) before the feed started: the waiting work is cancelled."""
        executor = FeedExecutor(Feed())
        waiting = [executor.submit(pow, 2, i) for i in range(3)]
        assert repr(executor) == "<FeedExecutor open [3 pending, 0 handed to the pool]>"
        executor.shutdown(wait=True, cancel_futures=True)
        assert all(f.cancelled() for f in waiting)
        assert repr(executor) == "<FeedExecutor shut down [0 pending, 0 handed to the pool]>"
        with pytest.raises(RuntimeError, match=r"^cannot schedule new futures after shutdown$"):
            executor.submit(pow, 2, 2)

    async def test_pool_executor_shutdown_on_the_pools_loop_should_return_at_once_and_let_the_work_finish(self):
        """Test that shutdown(wait=True) on the loop the work needs does not wait (it would stop that loop)."""
        feed, pool = Feed(), Pool(hold=True)
        try:
            pool.attach(feed)
            executor = PoolExecutor(feed)
            future = executor.submit(pow, 2, 10)
            await eventually(lambda: pool.running == 1, timeout=WAIT_S, interval=0.001)
            executor.shutdown(wait=True)  # on the loop: returns, the call still in flight
            assert not future.done()
            pool.release()
            assert await outcomes([future]) == ["pow"]  # (the fake pool answers with the call's name)
        finally:
            await closed(pool)
