"""Backpressure hooks the integration tests ship to real workers.

A non-test module, so workers import the hooks by name when a pool ships them.
"""

from __future__ import annotations

import asyncio
import time


class RejectNamed:
    """A custom hook: reject calls to one routine (picklable, shipped to workers)."""

    def __init__(self, name):
        self.name = name

    def __call__(self, ctx):
        return ctx.task.name == self.name


class StallAfterAccepting:
    """A hook that accepts everything, but stalls the worker's I/O loop right after accepting a call to ``name``.

    The stall (a blocking sleep, the GIL released) comes before the loop's
    next turn, so the routine starts on its own thread while the Accept
    has not been written yet: what a worker dying in a call's first step
    looks like, made certain rather than a race.
    """

    def __init__(self, name, seconds):
        self.name = name
        self.seconds = seconds

    def __call__(self, ctx):
        if ctx.task.name == self.name:
            asyncio.get_running_loop().call_soon(time.sleep, self.seconds)
        return False


class AsyncCap:
    """An async hook: a task-count cap that awaits before deciding."""

    def __init__(self, cap):
        self.cap = cap

    async def __call__(self, ctx):
        await asyncio.sleep(0)
        return ctx.active_task_count >= self.cap


class Exploding:
    """A hook that raises for one routine (a bug in the hook)."""

    def __call__(self, ctx):
        if ctx.task.name == "fail":
            raise RuntimeError("hook bug")
        return False
