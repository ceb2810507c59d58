"""Tests for pool._transport._malloc: the copy into new bytes, and the large-value flag that trim resets."""

from __future__ import annotations

import array
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pool._transport import _malloc
from pool._transport._malloc import HUGE_PAGE_BYTES, large_since_trim, to_bytes, trim, tune


class TestToBytes:
    @given(st.binary(max_size=4096), st.integers(min_value=0, max_value=64), st.integers(min_value=0, max_value=64))
    def test_to_bytes_should_equal_bytes_when_given_any_contiguous_slice(self, data, start, cut):
        """Test that the copy holds exactly the buffer's bytes, wherever the slice starts and ends."""
        view = memoryview(bytearray(data))[start : max(start, len(data) - cut)]
        out = to_bytes(view)
        assert type(out) is bytes and out == bytes(view)

    @pytest.mark.parametrize("size", [HUGE_PAGE_BYTES - 1, HUGE_PAGE_BYTES * 3 + 12345])
    def test_to_bytes_should_copy_every_byte_when_the_value_spans_huge_pages(self, size):
        """Test a value large enough for the huge-page advice: the whole of it arrives, first and last bytes too."""
        data = bytes(range(256)) * (size // 256) + b"\xaa" * (size % 256)
        out = to_bytes(memoryview(data))
        assert len(out) == size and out == data

    def test_to_bytes_should_copy_the_bytes_not_the_items_when_items_are_wider_than_a_byte(self):
        """Test that a typed buffer (4-byte ints, a 2-d view) is copied in full, as bytes() copies it."""
        ints = array.array("i", range(1000))
        assert to_bytes(memoryview(ints)) == ints.tobytes()
        square = memoryview(bytearray(range(64))).cast("B", (8, 8))
        assert to_bytes(square) == bytes(range(64))

    def test_to_bytes_should_fall_back_to_bytes_when_the_buffer_is_not_contiguous(self):
        """Test that a strided view is copied by bytes() (element order), not read as one block."""
        data = bytes(range(100))
        assert to_bytes(memoryview(data)[::3]) == data[::3]

    def test_to_bytes_should_leave_the_source_unchanged_when_it_is_written_afterwards(self):
        """Test that the result is a copy: changing the source later does not change it."""
        source = bytearray(b"abc" * 1000)
        out = to_bytes(memoryview(source))
        source[:3] = b"xyz"
        assert out[:3] == b"abc"


class TestTrim:
    def test_large_since_trim_should_be_true_when_a_large_value_came_after_the_last_trim(self):
        """Test that tune and to_bytes mark a large value, and trim clears the mark."""
        trim()
        assert large_since_trim() is False
        tune()
        assert large_since_trim() is True
        trim()
        assert large_since_trim() is False
        to_bytes(memoryview(b"x"))
        assert large_since_trim() is True
        trim()
        assert large_since_trim() is False

    def test_tune_should_apply_once_when_called_again(self):
        """Test that the allocator is tuned the first time only (it is a process-wide setting)."""
        tune()
        tune()
        assert _malloc._done is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's soname is Linux's")
def test_the_c_library_loads_by_its_soname_without_running_ldconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    """``find_library`` forks ``ldconfig -p`` (~5 ms on each worker's start): glibc's soname is tried first."""
    import ctypes.util

    def no_search(name: str) -> None:
        raise AssertionError(f"find_library({name!r}) was called")

    monkeypatch.setattr(ctypes.util, "find_library", no_search)
    assert _malloc._libc().malloc_trim(0) in (0, 1)
    monkeypatch.setattr(_malloc, "_done", False)
    tune()
    trim()
