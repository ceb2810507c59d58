"""``pool.map``: run a routine over many items, at most ``concurrency`` at a time.

A sliding window (seed 002): the first ``concurrency`` items are
dispatched, and each finished item makes room for the next. Items are
pulled from the iterable only as room appears, so a generator of a
million items is never materialised, and every item is dispatched exactly
once. Results come in input order (``ordered=True``, the default) or as
they complete.

In input order, an item counts against the window until it has been
yielded, so a slow first item holds the window rather than letting
finished results pile up without bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

from .._base import public
from .._observe import Progress, known_length, reporter

T = TypeVar("T")
R = TypeVar("R")


def map(  # pool.map, by analogy with the builtin
    routine: Callable[[T], Awaitable[R]],
    items: Iterable[T] | AsyncIterable[T],
    *,
    concurrency: int,
    ordered: bool = True,
    return_exceptions: bool = False,
    progress: Callable[[Progress], Any] | bool | None = None,
) -> AsyncIterator[R | BaseException]:
    """Yield ``routine(item)`` for each item, with at most ``concurrency`` in flight.

    Args:
        routine: A routine (or any coroutine function) of one argument.
        items: An iterable or async iterable; consumed lazily.
        concurrency: Calls in flight at most (>= 1).
        ordered: Yield in input order (True) or as calls complete (False).
        return_exceptions: Yield a failed item's exception in its place and
            go on (True), or stop at the first failure (False): cancel the
            calls in flight, dispatch nothing more, and raise it.
        progress: Called with a `Progress` (done, failed, in flight, total)
            after each dispatch and each end; True draws a rich progress bar
            on stderr (the ``status`` extra).

    Cancelling the consumer, or closing the iterator (``aclose()``; use
    ``contextlib.aclosing`` to close it on ``break``), cancels the calls in
    flight and dispatches nothing more.

    Raises:
        ValueError, TypeError: ``concurrency`` is not an int >= 1 (at once).
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int):
        raise TypeError(f"concurrency: expected an int >= 1, got {concurrency!r}")
    if concurrency < 1:
        raise ValueError(f"concurrency: expected an int >= 1, got {concurrency!r}")
    report = reporter(progress, getattr(routine, "__name__", "map"), items)
    return _window(routine, items, concurrency, ordered, return_exceptions, report)


async def _window(
    routine: Callable[[T], Awaitable[R]],
    items: Iterable[T] | AsyncIterable[T],
    concurrency: int,
    ordered: bool,
    return_exceptions: bool,
    report: Callable[[Progress], Any] | None = None,
) -> AsyncIterator[R | BaseException]:
    source = _aiter(items)
    window: dict[int, asyncio.Task[Any]] = {}
    counts = _Counts(report, known_length(items))
    exhausted = False
    next_index = 0
    to_yield = 0
    try:
        while True:
            while not exhausted and len(window) < concurrency:
                try:
                    item = await anext(source)
                except StopAsyncIteration:
                    exhausted = True
                    break
                window[next_index] = asyncio.ensure_future(counts.call(routine, item))
                next_index += 1
            if not window:
                return
            if ordered:
                while not window[to_yield].done():
                    await asyncio.wait(window.values(), return_when=asyncio.FIRST_COMPLETED)
                    if not return_exceptions:
                        _raise_first_failure(window)  # do not wait for the head to learn of it
                done = [window.pop(to_yield)]
                to_yield += 1
            else:
                finished, _ = await asyncio.wait(window.values(), return_when=asyncio.FIRST_COMPLETED)
                done = [t for t in window.values() if t in finished]
                for index in [i for i, t in window.items() if t in finished]:
                    del window[index]
            for task in done:
                if task.exception() is None:
                    yield task.result()
                elif return_exceptions:
                    yield task.exception()  # type: ignore[misc]
                else:
                    raise task.exception()  # type: ignore[misc]
    finally:
        for task in window.values():
            task.cancel()
        if window:
            await asyncio.gather(*window.values(), return_exceptions=True)
        if hasattr(source, "aclose"):
            await source.aclose()
        counts.close()


class _Counts:
    """Done / failed / in flight, reported after each change (no report: nothing but three ints)."""

    def __init__(self, report: Callable[[Progress], Any] | None, total: int | None) -> None:
        self._report = report
        self._total = total
        self.done = self.failed = self.in_flight = 0

    async def call(self, routine: Callable[[T], Awaitable[R]], item: T) -> R:
        """``routine(item)``, counted inside its task (so the counts are right the moment it is done)."""
        self.in_flight += 1
        self._emit()
        ok = False
        try:
            result = await routine(item)
            ok = True
            return result
        finally:
            self.in_flight -= 1
            if ok:
                self.done += 1
            else:
                self.failed += 1
            self._emit()

    def _emit(self) -> None:
        if self._report is not None:
            self._report(Progress(self.done, self.failed, self.in_flight, self._total))

    def close(self) -> None:
        close = getattr(self._report, "close", None)
        if close is not None:
            close()


def _raise_first_failure(window: dict[int, asyncio.Task[Any]]) -> None:
    for task in window.values():
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def _aiter(items: Iterable[T] | AsyncIterable[T]) -> AsyncIterator[T]:
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
    else:
        for item in items:
            yield item


public(map)
