"""Tables that read one line per row at any terminal width: which columns to keep, and how wide.

rich fits a table that is too wide by wrapping every cell ("rou/tin/e" at 80
columns), and it cannot leave a column out. So the command-line tables say
here, per column, whether its cells must stay whole (an id, a routine, a
state), may be cut with an ellipsis (an error, an address), and in what order
columns go when the terminal is narrow; `fit` decides from the terminal's
width, and `one_line_table` builds the rich table with every width fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

BORDER_PER_COLUMN: Final[int] = 3
"""What rich's default table spends per column besides the cells: a space of padding each side and a rule."""


@dataclass(frozen=True)
class Column:
    """One column of a command-line table.

    Attributes:
        header: its heading.
        drop: 0 if the column is always kept; otherwise the columns with the
            highest ``drop`` go first when the terminal is too narrow for all.
        cut_to: 0 if the cells are never cut (the column is as wide as its
            widest cell); otherwise the cells may be cut with an ellipsis, down
            to this many characters (the column goes if even that does not fit).
        justify: how rich aligns the cells.
    """

    header: str
    drop: int = 0
    cut_to: int = 0
    justify: Literal["left", "center", "right"] = "left"


@dataclass(frozen=True)
class Fitted:
    """A column `fit` kept, with the width it gets and its position among the given columns."""

    column: Column
    index: int
    width: int


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[Fitted]:
    """The columns that fit ``width`` terminal cells with one line per row, in their order, and their widths.

    Whole columns get their widest cell; columns that may be cut share what
    is left (each at least its ``cut_to``, at most its widest cell). While
    the kept columns need more than ``width``, the one with the highest
    ``drop`` goes; columns with ``drop`` 0 stay even then (rich cuts them).
    """
    natural = [max([len(column.header), *(len(row[i]) for row in rows)]) for i, column in enumerate(columns)]
    kept = list(range(len(columns)))

    def need(indexes: list[int]) -> int:
        cells = sum(natural[i] if not columns[i].cut_to else min(natural[i], columns[i].cut_to) for i in indexes)
        return cells + BORDER_PER_COLUMN * len(indexes) + 1

    while need(kept) > width and any(columns[i].drop for i in kept):
        kept.remove(max((i for i in kept if columns[i].drop), key=lambda i: columns[i].drop))
    spare = width - need(kept)
    widths = {}
    for i in kept:
        if columns[i].cut_to:
            base = min(natural[i], columns[i].cut_to)
            grown = min(natural[i], base + max(spare, 0))
            spare -= grown - base
            widths[i] = grown
        else:
            widths[i] = natural[i]
    return [Fitted(columns[i], i, widths[i]) for i in kept]


def one_line_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int, **table: Any) -> Any:
    """A rich ``Table`` of ``rows`` that reads one line per row at ``width`` (rich imported here).

    Args:
        columns: the columns, in display order.
        rows: the cells as text, one sequence per row, in the order of ``columns``.
        width: the terminal's width (``Console.width``: 80 when piped).
        **table: passed to ``rich.table.Table`` (a title, ``show_header``, ...).
    """
    from rich.table import Table

    fitted = fit(columns, rows, width)
    result = Table(**table)
    for f in fitted:
        result.add_column(f.column.header, width=f.width, no_wrap=True, overflow="ellipsis", justify=f.column.justify)
    for row in rows:
        result.add_row(*(row[f.index] for f in fitted))
    return result
