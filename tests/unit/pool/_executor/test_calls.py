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
