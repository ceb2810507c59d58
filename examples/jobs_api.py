"""Seed 004 as a service: durable jobs behind an HTTP API, with 202, attach, and 429.

A Starlette app opens one WorkerPool with a SQLite job store for its
lifetime. ``POST /jobs?file=NAME`` submits a conversion job whose id is
``convert:NAME`` and answers 202 with it; posting the same file while its
job is pending or running attaches to that job instead of starting a
second one. ``GET /jobs/{id}`` shows the job's state, attempts and result
or error. Past ``--ceiling`` active jobs the pool refuses: 429 with a
``Retry-After`` header. Jobs live in the store, not in this process: stop
the server (even with SIGKILL), start it again on the same ``--store``,
and every accepted job still runs.

Needs the web extra: ``pip install 'leakypool[web]'``. Run it::

    python examples/jobs_api.py --store jobs.db --workers 2 --port 8000
    curl -X POST 'http://127.0.0.1:8000/jobs?file=report.pdf&seconds=2'
    curl 'http://127.0.0.1:8000/jobs/convert:report.pdf'
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
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
async def convert(name: str, seconds: float) -> dict[str, Any]:
    """The slow part: "convert" a file on a worker."""
    await asyncio.sleep(seconds)
    return {"file": name, "pages": len(name), "pid": os.getpid()}


def describe(job: pool.Job) -> dict[str, Any]:
    """A job as JSON."""
    return {
        "id": job.id,
        "state": job.state,
        "attempts": job.attempts,
        "error": job.error or None,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def make_app(store: str, workers: int, ceiling: int, deadline: float) -> Starlette:
    """The app: one pool with a store for its lifetime."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with pool.WorkerPool(
            spawn=workers,
            backpressure=TaskCountBackpressure(1),
            loadbalancer=PriorityLoadBalancer(),
            store=store,
            max_pending=ceiling,
            dispatch_deadline=deadline,
        ) as workers_pool:
            app.state.pool = workers_pool
            yield

    async def submit(request: Request) -> JSONResponse:
        name = request.query_params.get("file", "")
        try:
            seconds = float(request.query_params.get("seconds", "1"))
        except ValueError:
            return JSONResponse({"error": "seconds: expected a number"}, status_code=400)
        if not name:
            return JSONResponse({"error": "file: expected a file name"}, status_code=400)
        try:
            job = await convert.options(job_id=f"convert:{name}").submit(name, seconds)
        except pool.AdmissionRejected as exc:
            retry = max(1, math.ceil(exc.retry_after))
            return JSONResponse({"error": str(exc)}, status_code=429, headers={"Retry-After": str(retry)})
        return JSONResponse(describe(job), status_code=202, headers={"Location": f"/jobs/{job.id}"})

    async def show(request: Request) -> JSONResponse:
        job = await request.app.state.pool.jobs.get(request.path_params["job_id"])
        if job is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        body = describe(job)
        if job.state == "succeeded":
            body["result"] = await job.result()
        return JSONResponse(body)

    routes = [Route("/jobs", submit, methods=["POST"]), Route("/jobs/{job_id:str}", show)]
    return Starlette(routes=routes, lifespan=lifespan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="jobs.db", help="SQLite file for the jobs (default ./jobs.db)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes, one task each (default 2)")
    parser.add_argument("--ceiling", type=int, default=100, help="active jobs at most, pending + running (default 100)")
    parser.add_argument(
        "--deadline", type=float, default=600.0, help="seconds a job may wait for a worker (default 600)"
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    app = make_app(f"sqlite:///{os.path.abspath(args.store)}", args.workers, args.ceiling, args.deadline)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
