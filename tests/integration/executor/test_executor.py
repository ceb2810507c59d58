"""pool.Executor and WorkerPool.executor() with real workers: the standard library's Executor behaviours
(CPython's test_concurrent_futures checks these on every executor) and what leakypool adds."""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import gc
import weakref

import pytest

import pool
from backpressure import TaskCountBackpressure
from pool._executor._feed import IN_FLIGHT_PER_WORKER
from tests.integration.routines import executor_calls as calls

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ex():
    """One executor of two workers shared by the tests that leave it as they found it."""
    executor = pool.Executor(2)
    executor.submit(pow, 2, 2).result(timeout=60)  # workers start here, not inside the first test
    yield executor
    executor.shutdown(wait=True)


# -- submit ------------------------------------------------------------------------------------


def test_submit_should_pass_keyword_arguments_named_fn_and_self(ex):
    """Test that ``fn`` is positional-only: keywords named fn and self reach the callable."""
    assert ex.submit(calls.capture, 1, self=2, fn=3).result(timeout=30) == ((1,), {"self": 2, "fn": 3})


def test_submit_should_raise_type_error_when_fn_is_a_keyword(ex):
    """Test that submit(fn=...) is a TypeError, as in the standard library."""
    with pytest.raises(TypeError):
        ex.submit(fn=calls.square)


def test_submit_should_run_lambdas_closures_async_functions_and_routines(ex):
    """Test that any picklable callable runs: a lambda, a closure, an async def function, a pool.Routine."""
    k = 5
    assert ex.submit(lambda x: x + k, 1).result(timeout=30) == 6
    assert ex.submit(calls.adouble, 4).result(timeout=30) == 8
    assert ex.submit(calls.triple, 4).result(timeout=30) == 12
    assert ex.submit(pow, 2, 10).result(timeout=30) == 1024


def test_submit_should_raise_the_callables_error_with_its_remote_traceback(ex):
    """Test that the callable's exception comes back with its type and the worker's traceback as cause."""
    with pytest.raises(ValueError, match="item 3 is bad") as info:
        ex.submit(calls.fail_at, 3, 3).result(timeout=30)
    assert isinstance(info.value.__cause__, pool.RemoteTraceback)
    assert "fail_at" in str(info.value.__cause__)


def test_submit_should_fail_the_future_when_an_argument_cannot_be_pickled(ex):
    """Test that an unpicklable argument fails its future with SerializationError (not submit itself)."""
    import threading

    future = ex.submit(calls.square, threading.Lock())
    assert isinstance(future.exception(timeout=30), pool.SerializationError)


def test_submit_should_keep_no_reference_to_fn_or_its_arguments(ex):
    """Test that, once a call is submitted, the executor holds neither fn nor its arguments (CPython gh-60488)."""
    box, arg = calls.Box(7), calls.Box(1)
    box_ref, arg_ref = weakref.ref(box), weakref.ref(arg)
    future = ex.submit(box.get)
    other = ex.submit(calls.capture, arg)
    del box, arg
    gc.collect()
    assert box_ref() is None and arg_ref() is None
    assert future.result(timeout=30) == 7
    assert other.result(timeout=30)[0][0].value == 1


# -- map -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunksize", [1, 3, 64])
def test_map_should_yield_results_in_order_whatever_the_chunksize(ex, chunksize):
    """Test that map returns every result in input order, one call per chunk."""
    assert list(ex.map(calls.square, range(50), chunksize=chunksize)) == [i * i for i in range(50)]
    assert list(ex.map(pow, [2, 3, 4], [5, 6], chunksize=chunksize)) == [32, 729]


@pytest.mark.parametrize("chunksize", [1, 4])
def test_map_should_raise_an_exception_at_its_item(ex, chunksize):
    """Test that a failing item raises there (same type, remote traceback), after the results before it."""
    results = ex.map(calls.fail_at, range(10), [5] * 10, chunksize=chunksize)
    seen = []
    with pytest.raises(ValueError, match="item 5 is bad") as info:
        seen.extend(results)
    assert seen == [0, 1, 2, 3, 4]
    assert isinstance(info.value.__cause__, pool.RemoteTraceback)
    assert "fail_at" in str(info.value.__cause__)


def test_map_should_honour_buffersize(ex):
    """Test that buffersize keeps map lazy on an endless input (3.14's behaviour, on every Python)."""
    import itertools

    results = ex.map(calls.square, itertools.count(), buffersize=4)
    assert [next(results) for _ in range(10)] == [i * i for i in range(10)]
    results.close()
    with pytest.raises(ValueError, match="buffersize"):
        ex.map(calls.square, [1], buffersize=0)


def test_map_should_raise_timeout_error_counted_from_the_call():
    """Test that map's timeout is one deadline: a held item raises TimeoutError, and closing cancels the rest."""
    with pool.Executor(1) as ex, calls.Gate() as gate:
        results = ex.map(calls.hold, [gate.address] * 8, range(8), timeout=0.2)
        gate.started()
        with pytest.raises(TimeoutError):
            next(results)
        gate.release()


def test_map_iterator_should_not_keep_results_alive(ex):
    """Test that a result the map iterator yielded is freed once the reader drops it (CPython bpo-14406)."""
    for chunksize in (1, 2):
        for obj in ex.map(calls.make_box, range(4), chunksize=chunksize):
            ref = weakref.ref(obj)
            del obj
            gc.collect()
            assert ref() is None


# -- shutdown ------------------------------------------------------------------------------------


def test_shutdown_right_after_map_should_finish_the_work_and_not_hang():
    """Test that shutdown(wait=True) straight after map waits for the mapped work, then returns."""
    ex = pool.Executor(1)
    results = ex.map(calls.square, range(20))
    ex.shutdown(wait=True)
    assert list(results) == [i * i for i in range(20)]


def test_shutdown_twice_should_be_harmless_and_submit_after_it_should_raise():
    """Test that shutdown is idempotent and a later submit raises the standard library's RuntimeError."""
    ex = pool.Executor(1)
    assert ex.submit(calls.square, 3).result(timeout=30) == 9
    ex.shutdown()
    ex.shutdown()
    with pytest.raises(RuntimeError, match="cannot schedule new futures after shutdown"):
        ex.submit(calls.square, 3)


def test_shutdown_should_cancel_futures_not_started_when_asked():
    """Test that cancel_futures cancels what was not handed to the pool; those never run; the rest finish."""
    ex = pool.Executor(1)
    with calls.Gate() as gate:
        first = ex.submit(calls.hold, gate.address, "first")
        gate.started()
        later = [ex.submit(calls.square, i) for i in range(IN_FLIGHT_PER_WORKER + 20)]
        ex.shutdown(wait=False, cancel_futures=True)
        gate.release()
    ex.shutdown(wait=True)
    assert first.result() == "first"
    cancelled = [f for f in later if f.cancelled()]
    assert len(cancelled) >= len(later) - IN_FLIGHT_PER_WORKER
    assert all(f.result() == i * i for i, f in enumerate(later) if not f.cancelled())


def test_a_future_cancelled_before_it_starts_should_never_run():
    """Test that cancel() on a pending future wins: it never runs and the executor goes on."""
    with pool.Executor(1) as ex, calls.Gate() as gate:
        held = [ex.submit(calls.hold, gate.address) for _ in range(IN_FLIGHT_PER_WORKER)]
        gate.started()
        victim = ex.submit(calls.die)  # would take a worker down if it ran
        assert victim.cancel()
        for _ in held[1:]:  # a worker runs one plain call at a time: each held call starts after the one before
            gate.release()
            gate.started()
        gate.release()
        cf.wait(held, timeout=30)
        assert ex.submit(calls.square, 4).result(timeout=30) == 16
    assert victim.cancelled()


# -- what leakypool adds ---------------------------------------------------------------------------


def test_a_lost_worker_should_fail_only_its_own_future_and_the_executor_should_go_on():
    """Test that a worker dying mid-call fails that future with WorkerBroken; other and later calls succeed."""
    with pool.Executor(
        2, backpressure=TaskCountBackpressure(1)
    ) as ex:  # a call at a time per worker, as plain calls run
        doomed = ex.submit(calls.die)
        others = [ex.submit(calls.square, i) for i in range(10)]
        with pytest.raises(pool.WorkerBroken):
            doomed.result(timeout=60)
        assert [f.result(timeout=60) for f in others] == [i * i for i in range(10)]
        assert list(ex.map(calls.square, range(10), chunksize=2)) == [i * i for i in range(10)]


def test_every_accepted_future_should_fail_when_the_pool_cannot_start():
    """Test that a pool that does not start ends every future with that error instead of hanging."""
    ex = pool.Executor(1, startup_timeout=0.001)
    futures = [ex.submit(calls.square, i) for i in range(3)]
    for future in futures:
        assert isinstance(future.exception(timeout=60), pool.WorkerStartError)
    assert isinstance(ex.submit(calls.square, 1).exception(timeout=60), pool.WorkerStartError)
    ex.shutdown()


def test_queue_depth_should_bound_the_queue_and_refuse_with_admission_rejected():
    """Test that with queue_depth a refused submit ends its future in AdmissionRejected, the rest run.

    One call runs, one waits in its worker's line (plain_prefetch=1), one in the queue: of four more, two are refused.
    """
    with (
        pool.Executor(
            1, queue_depth=1, admission_timeout=0, backpressure=TaskCountBackpressure(1), plain_prefetch=1
        ) as ex,
        calls.Gate() as gate,
    ):
        held = ex.submit(calls.hold, gate.address, "held")
        gate.started()
        more = [ex.submit(calls.square, i) for i in range(4)]
        cf.wait(more, timeout=30, return_when=cf.FIRST_EXCEPTION)
        refused = [f for f in more if f.done() and isinstance(f.exception(), pool.AdmissionRejected)]
        assert refused
        gate.release()
        assert held.result(timeout=30) == "held"


def test_an_initializer_that_raises_should_fail_every_future():
    """Test that an Executor builds with a raising initializer and its futures end in WorkerInitError."""
    ex = pool.Executor(1, initializer=calls.die_init)
    assert isinstance(ex.submit(calls.square, 2).exception(timeout=60), pool.WorkerInitError)
    ex.shutdown()


def test_the_initializer_should_run_once_in_each_worker_before_its_calls():
    with pool.Executor(2, initializer=calls.load, initargs=("small",)) as ex:
        models = set(ex.map(calls.model, range(20)))
    assert len(models) in (1, 2) and all(str(m).startswith("small in ") for m in models)


def test_max_tasks_per_child_should_recycle_workers_and_lose_no_call():
    """Test the shape of cpython#115634 (1 < max_tasks_per_child < tasks / workers): every call ends, pids change."""
    with pool.Executor(2, max_tasks_per_child=2) as ex:
        futures = [ex.submit(calls.pid) for _ in range(20)]
        pids = [f.result(timeout=60) for f in futures]
    assert len(set(pids)) >= 20 // (2 * 11 // 10 + 1)  # each worker's limit is drawn in [2, 2.2]: 2 calls a worker


# -- asyncio -------------------------------------------------------------------------------------


async def test_run_in_executor_should_work_with_an_executor():
    """Test that loop.run_in_executor and asyncio.wrap_future take a pool.Executor."""
    loop = asyncio.get_running_loop()
    ex = pool.Executor(1)
    try:
        assert await loop.run_in_executor(ex, calls.square, 6) == 36
        assert await asyncio.wrap_future(ex.submit(calls.square, 7)) == 49
    finally:
        await asyncio.to_thread(ex.shutdown)


async def test_run_in_executor_should_work_with_a_pool_view_on_its_own_loop():
    """Test p.executor() on the pool's loop: submit does not block, shutdown(wait=True) returns, the pool stays open."""
    loop = asyncio.get_running_loop()
    async with pool.WorkerPool(spawn=1) as p:
        with p.executor() as view:
            assert await loop.run_in_executor(view, calls.square, 5) == 25
            results = await asyncio.gather(*(loop.run_in_executor(view, calls.square, i) for i in range(30)))
            assert results == [i * i for i in range(30)]
        with pytest.raises(RuntimeError, match="after shutdown"):
            view.submit(calls.square, 1)
        assert await calls.triple(2) == 6  # the pool is still open
        other = p.executor()
        assert await asyncio.to_thread(lambda: list(other.map(calls.square, range(5), chunksize=2))) == [0, 1, 4, 9, 16]


async def test_a_view_should_queue_without_limit_over_a_pool_without_a_queue():
    """Test that p.executor() never refuses: a pool with queue_depth 0 and one slot still runs every call."""
    loop = asyncio.get_running_loop()
    async with pool.WorkerPool(spawn=1, backpressure=TaskCountBackpressure(1)) as p:
        view = p.executor()
        results = await asyncio.gather(*(loop.run_in_executor(view, calls.square, i) for i in range(12)))
        assert results == [i * i for i in range(12)]


async def test_closing_the_pool_should_end_the_views_unfinished_futures_in_pool_closed():
    """Test that when the pool closes, work of its view not yet handed to it ends in PoolClosed."""
    with calls.Gate() as gate:
        async with pool.WorkerPool(spawn=1, shutdown_grace=0) as p:
            view = p.executor()
            held = view.submit(calls.hold, gate.address)
            await asyncio.to_thread(gate.started)
            waiting = [view.submit(calls.square, i) for i in range(IN_FLIGHT_PER_WORKER + 10)]
        assert all(isinstance(f.exception(timeout=30), pool.PoolClosed) for f in waiting[IN_FLIGHT_PER_WORKER:])
        assert held.done()
        with pytest.raises(pool.PoolClosed):
            view.submit(calls.square, 1)
