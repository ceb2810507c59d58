"""``Executor.map`` without the executor: chunking, a bounded window of chunks, results in order.

Pure logic over ``concurrent.futures`` futures, so unit tests drive it with
futures they complete themselves. It follows CPython's ``Executor.map``
(``Lib/concurrent/futures/_base.py``, 3.14) and ``ProcessPoolExecutor.map``
(one call per chunk, results chained back in order):

    zip(*iterables) ──batched(chunksize)──> submit(chunk) ──> futures, in input order
                                             (all at once, or at most ``buffersize`` ahead)
    results: pop the oldest future, wait for it within what is left of ``timeout``,
             yield its values one by one, raise its error at its item

- ``timeout`` is one deadline counted from the call to ``map``, not per item.
- Closing the iterator (or an error or timeout escaping it) cancels every
  future not yet started; those already running finish, their results dropped.
- Nothing is kept past its turn: a value is popped from its chunk's list as it
  is yielded and a future dropped once read (CPython gh-59613, bpo-14406).
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

Chunk = tuple[tuple[Any, ...], ...]
"""The argument tuples of one worker call, in input order."""

Split = Callable[[Any], tuple[list[Any], BaseException | None]]
"""A chunk future's result -> (its values in order, the error raised at the item after the last value, or None)."""


def check_map_arguments(chunksize: int, buffersize: int | None) -> None:
    """Raise the standard library's errors for a bad ``chunksize`` or ``buffersize``.

    Raises:
        TypeError: ``buffersize`` is not an int (nor None).
        ValueError: ``chunksize < 1`` or ``buffersize < 1``.
    """
    if buffersize is not None and (isinstance(buffersize, bool) or not isinstance(buffersize, int)):
        raise TypeError("buffersize must be an integer or None")
    if buffersize is not None and buffersize < 1:
        raise ValueError("buffersize must be None or > 0")
    if chunksize < 1:
        raise ValueError("chunksize must be >= 1.")


def batched(items: Iterable[T], size: int) -> Iterator[tuple[T, ...]]:
    """Tuples of ``size`` consecutive items (the last one shorter); ``itertools.batched`` before 3.12."""
    iterator = iter(items)
    while chunk := tuple(itertools.islice(iterator, size)):
        yield chunk


def ordered_results(
    submit: Callable[[Chunk], cf.Future[Any]],
    chunks: Iterator[Chunk],
    split: Split,
    *,
    timeout: float | None = None,
    buffersize: int | None = None,
) -> Iterator[Any]:
    """Submit ``chunks`` (all now, or ``buffersize`` ahead) and return an iterator over their values in order.

    The submissions happen here, before the first ``next()``, as in the
    standard library (a ``map`` whose results are never read still runs).

    Args:
        submit: Starts one chunk's call; held weakly when it is a bound method
            (the iterator must not keep its executor alive).
        chunks: The chunks, lazily.
        split: Turns a chunk future's result into its values and error.
        timeout: Seconds from now for the whole iteration; past it ``next()``
            raises `TimeoutError`.
        buffersize: At most this many chunks submitted and not yet read.
    """
    end_time = None if timeout is None else time.monotonic() + timeout
    if buffersize:
        futures = collections.deque(submit(chunk) for chunk in itertools.islice(chunks, buffersize))
    else:
        futures = collections.deque(submit(chunk) for chunk in chunks)
    weak: Callable[[], Callable[[Chunk], cf.Future[Any]] | None]
    weak = weakref.WeakMethod(submit) if hasattr(submit, "__self__") else lambda: submit
    return _results(futures, chunks if buffersize else None, weak, split, end_time)


def _results(
    futures: collections.deque[cf.Future[Any]],
    chunks: Iterator[Chunk] | None,
    submit: Callable[[], Callable[[Chunk], cf.Future[Any]] | None],
    split: Split,
    end_time: float | None,
) -> Iterator[Any]:
    try:
        while futures:
            if chunks is not None:
                more = submit()
                if more is not None and (chunk := next(chunks, None)) is not None:
                    futures.append(more(chunk))
                more = chunk = None  # no reference to the executor or a chunk across the yield
            values, error = split(_result_or_cancel(futures.popleft(), end_time))
            values.reverse()
            while values:
                yield values.pop()
            if error is not None:
                raise error
    finally:
        for future in futures:
            future.cancel()


def _result_or_cancel(future: cf.Future[Any], end_time: float | None) -> Any:
    """``future``'s result within the deadline; cancel it if it is not done (CPython's ``_result_or_cancel``)."""
    try:
        try:
            return future.result(None if end_time is None else end_time - time.monotonic())
        finally:
            future.cancel()
    finally:
        del future  # the caller's frame must not keep the future (and its result) alive


def single(value: Any) -> tuple[list[Any], None]:
    """`Split` for a call of one item (chunksize 1): its value is the result itself."""
    return [value], None
