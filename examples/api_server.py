"""An HTTP API that runs a routine per request, with admission control (HTTP 429).

A Starlette app under uvicorn opens one WorkerPool for its lifetime. Each
request to ``/work?seconds=S`` dispatches a routine. Workers take one task
at a time (backpressure) in priority order; requests beyond the workers'
capacity wait in the pool's FIFO queue, and beyond ``--ceiling`` calls
(running + waiting) the pool refuses at once: the API answers 429 with a
``Retry-After`` header instead of piling up work.

With ``--discover lan`` (or ``local``) it spawns no workers and uses the
ones it finds instead (see examples/lan_cluster.md), with mutual TLS if
``--tls-ca/--tls-cert/--tls-key`` are given.

Needs the web extra: ``pip install 'leakypool[web]'``. Run it::

    python examples/api_server.py --workers 3 --ceiling 15 --port 8000
    curl 'http://127.0.0.1:8000/work?seconds=1'
    curl 'http://127.0.0.1:8000/stats'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import pool
from backpressure import TaskCountBackpressure
from balancer import PriorityLoadBalancer


@pool.routine
async def work(seconds: float) -> dict[str, float]:
    """The "expensive" part of a request, run on a worker."""
    start = time.time()
    await asyncio.sleep(seconds)
    return {"pid": os.getpid(), "start": start, "end": time.time()}


def make_app(workers: int, ceiling: int, deadline: float, pool_options: dict[str, Any]) -> Starlette:
    """The app: one pool for its lifetime; 429 when the pool refuses a call."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with pool.WorkerPool(
            spawn=workers,
            backpressure=TaskCountBackpressure(1),
            loadbalancer=PriorityLoadBalancer(),
            max_pending=ceiling,
            queue_depth=ceiling,
            dispatch_deadline=deadline,
            **pool_options,
        ) as workers_pool:
            app.state.pool = workers_pool
            yield

    async def run(request: Request) -> JSONResponse:
        try:
            seconds = float(request.query_params.get("seconds", "0.5"))
        except ValueError:
            return JSONResponse({"error": "seconds: expected a number"}, status_code=400)
        try:
            result = await work(seconds)
        except pool.AdmissionRejected as exc:
            retry = max(1, math.ceil(exc.retry_after))
            return JSONResponse({"error": str(exc)}, status_code=429, headers={"Retry-After": str(retry)})
        except (pool.NoWorkersAvailable, pool.WorkerBroken) as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        return JSONResponse(result)

    async def stats(request: Request) -> JSONResponse:
        s = request.app.state.pool.stats()
        return JSONResponse({k: v for k, v in vars(s).items() if isinstance(v, int)})  # the counts

    return Starlette(routes=[Route("/work", run), Route("/stats", stats)], lifespan=lifespan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=3, help="worker processes, one task each (default 3)")
    parser.add_argument("--ceiling", type=int, default=15, help="calls admitted at once, running + queued (default 15)")
    parser.add_argument(
        "--deadline", type=float, default=60.0, help="seconds a call may wait for a worker (default 60)"
    )
    parser.add_argument(
        "--discover",
        choices=["none", "lan", "local"],
        default="none",
        help="use workers found on the LAN / this machine instead of spawning",
    )
    parser.add_argument("--interfaces", action="append", default=[], help="with --discover lan: interface address")
    parser.add_argument("--tls-ca", help="CA of the workers' certificates (mutual TLS)")
    parser.add_argument("--tls-cert", help="this client's certificate")
    parser.add_argument("--tls-key", help="this client's key")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    options: dict[str, Any] = {}
    if args.discover != "none":
        options["discovery"] = (
            pool.LanDiscovery(interfaces=args.interfaces) if args.discover == "lan" else pool.LocalDiscovery()
        )
        args.workers = 0
    if args.tls_ca:
        options["credentials"] = pool.TlsCredentials(ca=args.tls_ca, cert=args.tls_cert, key=args.tls_key)
    app = make_app(args.workers, args.ceiling, args.deadline, options)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
