"""Fill a job store with finished jobs fast (one bulk INSERT ... SELECT), for (m): (g) and (h) beside a big history.

The jobs are ``succeeded``, finished now (so retention's default week keeps
them for the whole run), with tiny payloads: what a store that served a
million jobs a day holds between two purges.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time

from pool._jobs import open_store

_COLUMNS = "id, routine, state, attempts, max_attempts, created_at, started_at, finished_at, deadline, next_at, payload, outcome"


async def prefill(url: str, count: int) -> float:
    """Insert ``count`` finished jobs into the store at ``url`` (created if need be); seconds it took."""
    store = open_store(url)
    assert store is not None
    await store.open()  # the schema, at this release's version
    await store.close()
    t0, now = time.perf_counter(), time.time()
    if count <= 0:
        return 0.0
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect("/" + url[len("sqlite:///") :].lstrip("/"))) as db:
            db.execute(
                f"WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
                f"INSERT INTO jobs ({_COLUMNS}) SELECT 'done-' || i, 'bench.support.routines.noop', 'succeeded', 1, 1, "
                f"?, ?, ?, ? + 300, ?, x'00', x'00' FROM n",
                (count - 1, now, now, now, now, now),
            )
            db.commit()
            db.execute("ANALYZE")
    else:
        import asyncpg

        db = await asyncpg.connect(url)
        try:
            await db.execute(
                f"INSERT INTO leakypool_jobs ({_COLUMNS}) SELECT 'done-' || i, 'bench.support.routines.noop', 'succeeded', "
                f"1, 1, $2::float8, $2::float8, $2::float8, $2::float8 + 300, $2::float8, '\\x00'::bytea, "
                f"'\\x00'::bytea FROM generate_series(0, $1::int - 1) AS i",
                count,
                now,
            )
            await db.execute("VACUUM ANALYZE leakypool_jobs")  # a store of steady state: its history vacuumed
        finally:
            await db.close()
    return time.perf_counter() - t0


if __name__ == "__main__":
    import sys

    print(asyncio.run(prefill(sys.argv[1], int(sys.argv[2]))))
