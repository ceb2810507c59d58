"""Tests for pool._worker._release: memory given back once per idle spell, and only once idle long enough.

Real regions (`_buffers`) and the real heap trim (`_malloc`): what a tick did is read off them.
"""

from __future__ import annotations

import gc
import time

import pytest

from pool._transport import _buffers, _malloc
from pool._worker._release import RELEASE_AFTER_S, IdleRelease


def _large_value_seen() -> None:
    """Mark the heap as grown by a large value since its last trim (what reading one does)."""
    _malloc.to_bytes(memoryview(b"x" * 64))
    assert _malloc.large_since_trim()


def _idle_region() -> None:
    """Leave one idle region kept for reuse (a large value crossed, then was let go)."""
    payload = _buffers.pack(b"pickle", [memoryview(b"x" * (600 << 10))])
    del payload
    gc.collect()
    assert _buffers.idle_bytes() > 0


@pytest.fixture(autouse=True)
def nothing_kept():
    """Start and end each test with no idle region and a trimmed heap (the regions are process-wide)."""
    _buffers.release_idle()
    _malloc.trim()
    yield
    _buffers.release_idle()
    _malloc.trim()


def long_idle() -> float:
    """An idle spell that began well past `RELEASE_AFTER_S` ago."""
    return time.monotonic() - RELEASE_AFTER_S - 10.0


class TestIdleRelease:
    def test_tick_should_release_regions_and_trim_when_idle_long_enough(self):
        """Test that a worker idle past RELEASE_AFTER_S closes its idle regions and trims its heap."""
        _idle_region()
        _large_value_seen()
        IdleRelease().tick(0, long_idle())
        assert _buffers.idle_bytes() == 0
        assert not _malloc.large_since_trim()

    def test_tick_should_trim_when_a_large_value_was_seen_though_no_region_is_idle(self):
        """Test that the heap is trimmed after a large value even when no region was kept."""
        _large_value_seen()
        IdleRelease().tick(0, long_idle())
        assert not _malloc.large_since_trim()

    def test_tick_should_keep_everything_when_a_call_is_in_flight(self):
        """Test that a busy worker keeps its regions for the next large call."""
        _idle_region()
        _large_value_seen()
        IdleRelease().tick(1, long_idle())
        assert _buffers.idle_bytes() > 0
        assert _malloc.large_since_trim()

    def test_tick_should_keep_everything_when_idle_for_less_than_the_delay(self):
        """Test that a worker idle for a moment (between two calls) keeps its regions."""
        _idle_region()
        _large_value_seen()
        IdleRelease().tick(0, time.monotonic())  # RELEASE_AFTER_S (2 s) from now: far from due
        assert _buffers.idle_bytes() > 0
        assert _malloc.large_since_trim()

    def test_tick_should_release_once_per_idle_spell_when_ticked_again(self):
        """Test that a second tick in the same spell does nothing, and a new spell releases again."""
        release = IdleRelease()
        spell = long_idle()
        release.tick(0, spell)
        _large_value_seen()
        release.tick(0, spell)
        assert _malloc.large_since_trim()  # the same spell: not again
        release.tick(0, spell + 1.0)  # a call came and went: a new spell, long idle too
        assert not _malloc.large_since_trim()
