"""Quick start: run coroutines and async generators on worker processes.

Starts a pool of local worker processes, then calls routines as if they
were local: a coroutine, a streaming async generator, one that raises, and
one that calls another routine from inside a worker.

Run it::

    python examples/quickstart.py --workers 2
"""

from __future__ import annotations

import argparse
import asyncio
import os

import pool


@pool.routine
async def add(x: int, y: int) -> int:
    return x + y


@pool.routine
async def countdown(n: int):
    for i in range(n, 0, -1):
        await asyncio.sleep(0.01)
        yield i


@pool.routine
async def where() -> int:
    return os.getpid()


@pool.routine
async def fib(n: int) -> int:
    """Each call below the top runs as its own routine call, spread over the pool."""
    if n < 2:
        return n
    a, b = await asyncio.gather(fib(n - 1), fib(n - 2))
    return a + b


@pool.routine
async def divide(x: float, y: float) -> float:
    return x / y


async def main(workers: int) -> None:
    async with pool.WorkerPool(spawn=workers) as p:
        print(f"pool: {p}")
        print(f"add(1, 2) = {await add(1, 2)}")
        print(f"countdown(3) = {[i async for i in countdown(3)]}")
        pids = sorted(set(await asyncio.gather(*(where() for _ in range(20)))))
        print(f"20 calls ran in worker processes {pids} (this process is {os.getpid()})")
        print(f"fib(10) = {await fib(10)} (177 nested routine calls)")
        try:
            await divide(1, 0)
        except ZeroDivisionError as exc:
            print(f"divide(1, 0) raised {type(exc).__name__}: {exc}, as it would locally")
        print(f"pool: {p}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="worker processes to start (default 2)")
    args = parser.parse_args()
    asyncio.run(main(args.workers))
