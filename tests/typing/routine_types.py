"""Checked by mypy (tools/check.sh), never run: what a user's type checker sees of routines.

A plain ``def`` routine's call is awaitable; an async one's is its coroutine; an async
generator's is an async iterator; options keep all three.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pool


@pool.routine
def crunch(block: bytes) -> int:
    return len(block)


@pool.routine
async def fetch(url: str) -> str:
    return url


@pool.routine
async def count(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


@pool.routine(timeout=5.0)
def crunch_bounded(block: bytes) -> int:
    return len(block)


async def use() -> None:
    size: int = await crunch(b"abc")
    text: str = await fetch("u")
    numbers: list[int] = [i async for i in count(3)]
    bounded: int = await crunch_bounded(b"")
    later: int = await crunch.options(timeout=1.0)(b"x")
    print(size, text, numbers, bounded, later)
