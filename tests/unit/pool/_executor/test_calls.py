"""Tests for pool._executor._calls: what a worker keeps of the callables it was sent (issue 42, difference 5)."""

from __future__ import annotations

import pickle

import pytest

from pool._executor import _calls


@pytest.fixture(autouse=True)
def _empty_cache(monkeypatch):
    monkeypatch.setattr(_calls, "_LOADED", {})
    monkeypatch.setattr(_calls, "_loaded_bytes", 0)


def _blob(size: int, tag: int = 0) -> bytes:
    return pickle.dumps((tag, b"x" * size))


def test_a_small_callable_should_load_once_and_be_kept():
    blob = _blob(100)
    assert _calls._load(blob) is _calls._load(bytes(blob))  # the same pickle, another bytes object


def test_a_callable_over_the_entry_limit_should_never_be_kept():
    """Test that a function that captured large data (10 MiB) is gone once its call is (the cache kept it all)."""
    blob = _blob(_calls.CACHE_ENTRY_BYTES + 1)
    assert _calls._load(blob) is not _calls._load(blob)
    assert _calls._LOADED == {}


def test_the_cache_should_stay_within_its_bytes_dropping_the_least_recently_used():
    size = _calls.CACHE_ENTRY_BYTES // 2
    blobs = [_blob(size, tag) for tag in range(3 * _calls.CACHE_BYTES // size)]
    first = _calls._load(blobs[0])
    for blob in blobs[1:]:
        _calls._load(blob)
        _calls._load(blobs[0])  # used again and again: kept
    assert _calls._loaded_bytes <= _calls.CACHE_BYTES
    assert sum(len(b) for b in _calls._LOADED) == _calls._loaded_bytes
    assert _calls._load(blobs[0]) is first
    assert blobs[1] not in _calls._LOADED


def test_a_callable_shipped_for_one_call_should_load_and_never_be_kept():
    """A joblib batch (a callable that carries its items) is shipped with ``keep=False``: nothing stays."""
    once = pickle.loads(pickle.dumps(_calls.Shipped(len, keep=False)))
    kept = pickle.loads(pickle.dumps(_calls.Shipped(abs)))
    assert once is len and kept is abs
    assert list(_calls._LOADED.values()) == [abs]  # only the one shipped to be kept


def _square(x: int) -> int:
    return x * x


def test_a_callable_carried_by_value_should_tag_its_call_with_this_interpreter():
    """Test that a lambda or closure sent through an executor goes only to workers of this Python (issue 54)."""
    from pool._transport import _wire

    factor = 3
    for fn, tag in ((lambda x: x * factor, _wire.INTERPRETER), (_square, ""), (len, "")):
        shipped = _calls.Shipped(fn)
        task = _calls.task_for(_calls.runner_for(_calls._apply, fn), (shipped, (2,), {}))
        assert task.interpreter == tag, fn


def test_a_large_callable_should_cross_out_of_band_and_load_from_a_view_of_its_region(monkeypatch):
    """Test that a callable that captured 2 MiB crosses as a buffer in a region beside the stream (where the stream
    has one), not inside the pickle read through the stream, and loads on the worker from a view of it."""
    from pool._transport import _buffers, _side, _wire

    monkeypatch.setattr(_side, "_expected", True)  # as in a process whose streams have side connections
    data = b"y" * (2 << 20)
    fn = lambda: len(data)
    small = _calls.task_for(_calls.runner_for(_calls._apply, len), (_calls.Shipped(len), ("abc",), {}))
    task = _calls.task_for(_calls.runner_for(_calls._apply, fn), (_calls.Shipped(fn), (), {}))
    assert not _buffers.is_payload(small.args)  # a small call keeps the plain pickle
    assert _buffers.is_payload(task.args) and _buffers.size(task.args) >= len(data)
    assert task.interpreter == _wire.INTERPRETER
    (shipped, args, kwargs), _ = _wire.unpack_args(task.args, "f")
    assert shipped() == len(data) and (args, kwargs) == ((), {}) and _calls._LOADED == {}
