"""Progress of a fan-out (``pool.map(..., progress=...)``): counts, and a rich bar for ``progress=True``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._base import public


@dataclasses.dataclass(frozen=True, slots=True)
class Progress:
    """Where a `pool.map` stands, given to its ``progress`` callback after each change.

    Attributes:
        done: Items whose call returned.
        failed: Items whose call raised (or was cancelled).
        in_flight: Items dispatched and not finished.
        total: Items in all, when the input has a length; else None.
    """

    done: int
    failed: int
    in_flight: int
    total: int | None


class RichBar:
    """A rich progress bar on stderr (``progress=True``; the ``status`` extra)."""

    def __init__(self, name: str, total: int | None) -> None:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        except ImportError:
            raise ImportError("progress=True needs rich: pip install 'leakypool[status]'") from None
        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._task = self._bar.add_task(name, total=total, detail="")
        self._bar.start()

    def __call__(self, p: Progress) -> None:
        self._bar.update(
            self._task,
            completed=p.done + p.failed,
            detail=f"{p.in_flight} in flight" + (f", {p.failed} failed" if p.failed else ""),
        )

    def close(self) -> None:
        self._bar.stop()


def reporter(
    progress: Callable[[Progress], Any] | bool | None, name: str, items: Any
) -> Callable[[Progress], Any] | None:
    """The callback ``progress`` asks for: its own, a `RichBar` for True, none for None/False."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return RichBar(name, known_length(items))
    if not callable(progress):
        raise TypeError(f"progress: expected a callable, True or None, got {progress!r}")
    return progress


def known_length(items: Any) -> int | None:
    try:
        return len(items)
    except TypeError:
        return None


public(Progress)
