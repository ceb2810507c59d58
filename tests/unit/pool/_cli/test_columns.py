"""Tests for `pool._cli._columns`: which columns a narrow terminal keeps, and how wide each one is."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool._cli._columns import BORDER_PER_COLUMN, Column, fit

COLUMNS = (Column("id"), Column("note", drop=1, cut_to=4), Column("size", drop=3), Column("when", drop=2))
ROWS = [("abcdef", "a long note here", "12", "2024-01-01")]


def kept(width: int) -> list[str]:
    return [f.column.header for f in fit(COLUMNS, ROWS, width)]


def test_fit_should_keep_every_column_when_there_is_room_and_give_the_cut_column_its_whole_text():
    """Test that a wide terminal keeps all columns, each as wide as its widest cell."""
    fitted = fit(COLUMNS, ROWS, 200)
    assert [(f.column.header, f.width) for f in fitted] == [("id", 6), ("note", 16), ("size", 4), ("when", 10)]


def test_fit_should_drop_the_highest_drop_first_then_the_next():
    """Test the drop order: size (3), then when (2), then note (1); id (0) never goes."""
    total = 6 + 4 + 4 + 10 + 4 * BORDER_PER_COLUMN + 1  # every column, the note at its shortest
    assert kept(total) == ["id", "note", "size", "when"]
    assert kept(total - 1) == ["id", "note", "when"]
    assert kept(6 + 4 + 2 * BORDER_PER_COLUMN + 1) == ["id", "note"]
    assert kept(10) == ["id"]
    assert kept(1) == ["id"]  # a column that may not go stays, even past the width


@given(width=st.integers(min_value=14, max_value=200))
def test_fit_should_never_be_wider_than_the_terminal_once_the_kept_columns_fit(width):
    """Test that the widths fitted, borders included, never exceed the width (the cut column takes the rest)."""
    fitted = fit(COLUMNS, ROWS, width)
    assert sum(f.width for f in fitted) + BORDER_PER_COLUMN * len(fitted) + 1 <= width
