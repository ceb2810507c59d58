"""Routines for the wool embedding test (wool imports them by name in its workers)."""

from __future__ import annotations

import asyncio
import os

import wool


@wool.routine
async def short_task(seconds: float) -> int:
    """Sleep a little; return the pid of the wool worker that ran it."""
    await asyncio.sleep(seconds)
    return os.getpid()
