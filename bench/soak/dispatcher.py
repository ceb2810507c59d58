"""One dispatching process of the jobs chaos soak (bench/soak/jobs.py): its submit loop, and the soak's handle on it.

The two sides talk in lines. The child prints on stdout::

    WORKERS pid ...       its workers' pids (at start, and whenever they change)
    ACK job-id time       a submit returned at that wall-clock time (acknowledged: committed)
    NACK job-id error     a submit raised (not acknowledged)
    STOPPED               it submits no more

and reads on stdin ``STOP`` (stop submitting, keep the pool up while the
backlog drains) and ``EXIT`` (close the pool and exit; also at the end of
stdin). Its log goes to stderr, which the soak passes on. A line cut short
is a process killed mid-line: the soak reads nothing from it.

    python -m bench.soak.dispatcher URL NAME LOG RATE    (the soak starts it; ``Dispatcher.start``)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import sys
import time
from typing import Any

import uvloop

from bench.soak.report import LEASE_TTL_S

SPAWN, CAPACITY = 2, 8  # each dispatching process's workers, and the tasks each takes at once


# -- one dispatching process ------------------------------------------------------------------


async def dispatcher(url: str, name: str, log: str, rate: float) -> None:
    """Submit jobs until "STOP" on stdin, printing ACK/NACK per submit and WORKERS pids; exit on "EXIT"."""
    import pool
    from backpressure import TaskCountBackpressure
    from bench.soak.routines import soak_task

    rng = random.Random(f"{name}-{os.getpid()}")
    commands: asyncio.Queue[str] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    async def read_commands() -> None:
        while line := await reader.readline():
            await commands.put(line.decode().strip())
        await commands.put("EXIT")

    async with pool.WorkerPool(
        spawn=SPAWN, backpressure=TaskCountBackpressure(CAPACITY), store=url, lease_ttl=LEASE_TTL_S, shutdown_grace=2.0
    ) as p:
        print("WORKERS", *p.pids, flush=True)
        reading = asyncio.ensure_future(read_commands())
        n = 0
        stop = False
        last_pids: list[int] = []
        while not stop:
            job_id = f"{name}-{n}"
            n += 1
            try:
                await soak_task.options(job_id=job_id, retries=20, dispatch_deadline=3600).submit(
                    log, job_id, rng.uniform(0.02, 0.3)
                )
            except pool.PoolError as exc:
                print("NACK", job_id, type(exc).__name__, flush=True)
            else:
                print("ACK", job_id, f"{time.time():.6f}", flush=True)
            if p.pids != last_pids:
                last_pids = list(p.pids)
                print("WORKERS", *last_pids, flush=True)
            await asyncio.sleep(rng.expovariate(rate))
            while not commands.empty():
                stop = stop or (await commands.get()) in ("STOP", "EXIT")
        print("STOPPED", flush=True)
        while (await commands.get()) != "EXIT":
            print("WORKERS", *p.pids, flush=True)
        reading.cancel()


# -- the soak's side -------------------------------------------------------------------------


class Dispatcher:
    """One dispatching process the soak runs, kills and restarts."""

    def __init__(self, index: int, url: str, log: str, rate: float) -> None:
        self.index, self.url, self.log, self.rate = index, url, log, rate
        self.generation = 0
        self.process: asyncio.subprocess.Process | None = None
        self.workers: list[int] = []
        self.reader: asyncio.Future[Any] | None = None
        self.started_at = 0.0
        self.rss_first: tuple[float, int] | None = None  # (when, KiB): the current process, once warmed up

    async def start(self, acked: dict[str, float], nacked: list[str], requeued: list[float]) -> None:
        self.generation += 1
        self.rss_first = None
        name = f"d{self.index}g{self.generation}"
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.soak.dispatcher",
            self.url,
            name,
            self.log,
            str(self.rate),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        self.started_at = time.monotonic()
        self.reader = asyncio.ensure_future(
            asyncio.gather(self._read(self.process, acked, nacked), self._read_log(self.process, requeued))
        )

    @staticmethod
    async def _read_log(process: asyncio.subprocess.Process, requeued: list[float]) -> None:
        """Pass the process's log on; note when it re-queued the running jobs of a process whose lease expired."""
        assert process.stderr is not None
        while line := await process.stderr.readline():
            if b"re-queued" in line:
                requeued.append(time.time())
            sys.stderr.write(line.decode(errors="replace"))

    async def _read(self, process: asyncio.subprocess.Process, acked: dict[str, float], nacked: list[str]) -> None:
        assert process.stdout is not None
        while line := await process.stdout.readline():
            if not line.endswith(b"\n"):
                break  # the process was killed mid-line: the rest never came (its submit was not acknowledged)
            kind, *rest = line.decode().split() or [""]
            if kind == "ACK":
                acked[rest[0]] = float(rest[1])  # when its submit returned
            elif kind == "NACK":
                nacked.append(rest[0])
            elif kind == "WORKERS":
                self.workers = [int(pid) for pid in rest]

    def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()

    async def reap(self) -> None:
        if self.process is not None:
            await self.process.wait()
        if self.reader is not None:
            await self.reader

    async def tell(self, command: str) -> None:
        if self.process is not None and self.process.stdin is not None and self.process.returncode is None:
            with contextlib.suppress(ConnectionError):
                self.process.stdin.write(command.encode() + b"\n")
                await self.process.stdin.drain()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="the store (postgresql://...)")
    parser.add_argument("name", help="prefix of the job ids this process submits")
    parser.add_argument("log", help="the file the soak routine logs each run's start and end in")
    parser.add_argument("rate", type=float, help="submits per second (exponential gaps)")
    args = parser.parse_args()
    uvloop.run(dispatcher(args.url, args.name, args.log, args.rate))
