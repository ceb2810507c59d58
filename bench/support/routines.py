"""Routines the benchmarks run (importable, so workers load them by reference)."""

from __future__ import annotations

import asyncio
import os
import time

import pool


@pool.routine
async def noop():
    return None


@pool.routine
async def sleeper(seconds):
    await asyncio.sleep(seconds)


@pool.routine
async def echo(payload):
    return payload


@pool.routine
async def worker_pid():
    return os.getpid()


@pool.routine
async def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pool.routine
async def stamp():
    """When the worker started it (wall clock, for start-minus-due)."""
    return time.time()
