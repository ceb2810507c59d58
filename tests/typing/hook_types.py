"""Checked by mypy (tools/check.sh), never run: what a user's type checker sees of backpressure hooks.

Composites take and keep `BackpressureLike` hooks (not Any): a non-hook is an error where it is written.
"""

from __future__ import annotations

from typing import assert_type

import backpressure


def compose() -> None:
    either = backpressure.AnyOf(backpressure.MemoryBackpressure(0.8), backpressure.LoopLagBackpressure(0.5))
    assert_type(either.hooks, tuple[backpressure.BackpressureLike, ...])
    assert_type(backpressure.MemoryBackpressure(0.8).max_fraction, float)
    assert_type(backpressure.LatencyBackpressure(0.2).window, int)
    backpressure.AllOf("not a hook")  # type: ignore[arg-type]  # the error this file checks is still reported
