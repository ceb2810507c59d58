"""Tests for pool._transport._buffers: a region's holders counted right from every thread, finalizers included.

Large values over real memfd regions, end to end, are in tests/integration/calls/test_large_values.py.
"""

from __future__ import annotations

import gc
import threading

from pool._transport import _buffers

WAIT_S = 10.0


def _payload() -> _buffers.Payload:
    return _buffers.pack(b"pickle", [memoryview(b"x" * (600 << 10))])


def _idle(region: _buffers.Region) -> bool:
    with _buffers._arena():
        return region in _buffers._free


def test_a_region_should_be_reused_only_once_its_payload_and_every_holder_let_go():
    payload = _payload()
    region = _buffers.region_of(payload)
    assert region is not None
    region.take()  # a peer it was lent to
    del payload
    gc.collect()
    assert region.lent == 1 and not _idle(region)
    region.give_back()
    assert region.lent == 0 and _idle(region)


def test_holders_taken_and_let_go_on_many_threads_at_once_should_count_exactly():
    """Test the counts under threads (the loop, a worker's plain and watch threads, finalizers all reach them)."""
    payload = _payload()
    region = _buffers.region_of(payload)
    assert region is not None
    start = threading.Barrier(8)

    def churn() -> None:
        start.wait(WAIT_S)
        for _ in range(2000):
            region.take()
            region.give_back()

    threads = [threading.Thread(target=churn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S)
    assert region.lent == 1  # its payload's alone
    del payload
    gc.collect()
    assert region.lent == 0 and _idle(region)


def test_letting_go_on_a_thread_that_holds_the_arena_should_not_wait_and_should_count_once_it_is_free():
    """Test a finalizer that runs while its own thread holds the arena's lock (garbage collected mid-update).

    A lock taken there would deadlock the thread; the region is counted out when the holder lets go.
    """
    payload = _payload()
    region = _buffers.region_of(payload)
    assert region is not None
    done = threading.Event()

    region.take()
    counted: list[int] = []

    def finalizer_inside() -> None:
        with _buffers._arena():
            region.give_back()  # as a finalizer would, mid-update
            counted.append(region.lent)  # not yet counted out: the lock is held
        done.set()

    thread = threading.Thread(target=finalizer_inside, daemon=True)
    thread.start()
    assert done.wait(WAIT_S), "letting go waited for a lock its own thread held"
    assert counted == [2] and region.lent == 1
