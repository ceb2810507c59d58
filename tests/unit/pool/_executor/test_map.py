"""Tests for pool/_executor/_map.py: chunking, the buffersize window, order, timeout and references."""

from __future__ import annotations

import concurrent.futures as cf
import gc
import weakref

import pytest

from pool._executor._map import batched, check_map_arguments, ordered_results, single


class Recorder:
    """A stand-in executor: completes each chunk's future at once (or leaves it pending) and records chunks."""

    def __init__(self, complete: bool = True) -> None:
        self.chunks: list[tuple] = []
        self.futures: list[cf.Future] = []
        self.complete = complete

    def submit(self, chunk):
        self.chunks.append(chunk)
        future: cf.Future = cf.Future()
        if self.complete:
            future.set_result(([args[0] * 10 for args in chunk], None))
        self.futures.append(future)
        return future


def split(result):
    return result


class TestBatched:
    def test_batched_should_cut_chunks_of_size_with_a_short_last_one(self):
        """Test that items are cut in order into chunks of ``size``, the last one shorter."""
        assert list(batched(range(7), 3)) == [(0, 1, 2), (3, 4, 5), (6,)]
        assert list(batched([], 3)) == []


class TestCheckMapArguments:
    @pytest.mark.parametrize(
        ("chunksize", "buffersize", "error"),
        [
            (0, None, ValueError),
            (1, 0, ValueError),
            (1, -1, ValueError),
            (1, 1.5, TypeError),
            (1, True, TypeError),
        ],
    )
    def test_check_should_raise_the_standard_errors_when_sizes_are_bad(self, chunksize, buffersize, error):
        """Test that a bad chunksize or buffersize raises as the standard library's map does."""
        with pytest.raises(error):
            check_map_arguments(chunksize, buffersize)


class TestOrderedResults:
    def test_ordered_results_should_submit_everything_before_the_first_next(self):
        """Test that, without buffersize, every chunk is submitted by the call itself (a map never read still runs)."""
        executor = Recorder()
        ordered_results(executor.submit, batched(((i,) for i in range(10)), 3), split)
        assert [len(c) for c in executor.chunks] == [3, 3, 3, 1]

    def test_ordered_results_should_yield_every_value_in_input_order(self):
        """Test that values come back in input order, chunk after chunk."""
        executor = Recorder()
        results = ordered_results(executor.submit, batched(((i,) for i in range(10)), 4), split)
        assert list(results) == [i * 10 for i in range(10)]

    def test_ordered_results_should_keep_at_most_buffersize_chunks_ahead(self):
        """Test that with buffersize, submission stays that many chunks ahead of the reader, also on endless input."""
        import itertools

        executor = Recorder()
        results = ordered_results(executor.submit, batched(((i,) for i in itertools.count()), 2), split, buffersize=3)
        assert len(executor.chunks) == 3
        assert [next(results) for _ in range(4)] == [0, 10, 20, 30]  # two chunks read
        assert len(executor.chunks) == 5
        results.close()

    def test_ordered_results_should_raise_an_error_at_its_item(self):
        """Test that a chunk's error comes after the values before it and the later chunks are cancelled."""
        boom = ValueError("item 4")
        futures = []

        def submit(chunk):
            future: cf.Future = cf.Future()
            if chunk[0][0] == 3:
                future.set_result(([30], boom))
            elif chunk[0][0] < 3:
                future.set_result(([a[0] * 10 for a in chunk], None))
            futures.append(future)
            return future

        results = ordered_results(submit, batched(((i,) for i in range(9)), 3), split)
        seen = []
        with pytest.raises(ValueError, match="item 4") as info:
            seen.extend(results)
        assert info.value is boom
        assert seen == [0, 10, 20, 30]
        assert futures[2].cancelled()

    def test_ordered_results_should_time_out_from_the_call_and_cancel_the_rest(self):
        """Test that timeout counts from the call: a future still pending raises TimeoutError and is cancelled."""
        executor = Recorder(complete=False)
        results = ordered_results(executor.submit, batched(((i,) for i in range(3)), 1), single, timeout=0)
        with pytest.raises(TimeoutError):
            next(results)
        assert all(f.cancelled() for f in executor.futures)

    def test_closing_the_iterator_should_cancel_what_has_not_started(self):
        """Test that closing the iterator cancels every chunk not yet read (a running one stays running)."""
        executor = Recorder(complete=False)
        results = ordered_results(executor.submit, batched(((i,) for i in range(4)), 1), single)
        executor.futures[0].set_running_or_notify_cancel()
        executor.futures[0].set_result(7)
        assert next(results) == 7
        executor.futures[1].set_running_or_notify_cancel()
        results.close()
        assert not executor.futures[1].cancelled() and executor.futures[1].running()
        assert executor.futures[2].cancelled() and executor.futures[3].cancelled()

    def test_the_iterator_should_not_keep_a_yielded_value_alive(self):
        """Test that a value the iterator yielded is freed once the reader drops it (CPython bpo-14406)."""

        class Obj:
            pass

        executor = Recorder(complete=False)
        results = ordered_results(executor.submit, batched(((i,) for i in range(3)), 3), split)
        executor.futures[0].set_result(([Obj(), Obj(), Obj()], None))
        for obj in results:
            ref = weakref.ref(obj)
            del obj
            gc.collect()
            assert ref() is None

    def test_the_iterator_should_not_keep_its_executor_alive(self):
        """Test that a bound submit is held weakly: with buffersize, a collected executor submits no more."""
        executor = Recorder()
        results = ordered_results(executor.submit, batched(((i,) for i in range(10)), 1), split, buffersize=2)
        ref = weakref.ref(executor)
        del executor
        gc.collect()
        assert ref() is None
        assert list(results) == [0, 10]
