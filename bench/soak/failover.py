"""The failover half of the jobs chaos soak: a primary and a synchronous standby, failed over again and again.

`pair` starts a throwaway primary and a synchronous streaming standby
(tests/pg.py: ``initdb``, ``pg_basebackup -R``, ``synchronous_standby_names``),
both on loopback. `Pair.failover` SIGKILLs the current primary's postmaster,
promotes the standby (``pg_ctl promote``), then rebuilds the dead primary as
the new standby (its data directory wiped, ``pg_basebackup -R`` from the new
primary) and restores synchronous replication, so the next failover can come.
The clients use `Pair.url`: both hosts with ``target_session_attrs=read-write``.

Also the soak's measures that need the job log: how long a failover kept
submits from committing, the longest stretch with jobs due and none starting,
and a process's RSS.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import heapq
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

from tests import pg

SYNC_NAME = "standby1"  # the cluster_name every node runs with; only a standby's counts (its walreceiver's name)
ORPHANS_GONE_S = 30.0  # a SIGKILLed postmaster's backends notice its death and exit within this
SYNC_WITHIN_S = 60.0  # a rebuilt standby streams synchronously within this
SLOW_PROMOTE_S = 2.0  # a promotion slower than this keeps the promoted node's log lines for the report


def _children(pid: int) -> list[int]:
    """Pids whose parent is ``pid`` (a postmaster's backends and helpers), from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def rss_kib(pid: int) -> int | None:
    """A process's resident set size in KiB (VmRSS), or None if it is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


class Pair:
    """A primary and its synchronous standby; the roles swap at each `failover`."""

    def __init__(self, primary: pg.Standby, standby: pg.Standby, database: str) -> None:
        self.primary, self.standby, self.database = primary, standby, database
        # the URL lists the nodes in a fixed order: after a failover the first may be the standby
        self.hosts = f"127.0.0.1:{primary.port},127.0.0.1:{standby.port}"

    def url(self) -> str:
        return f"postgresql://{pg.USER}:{pg.PASSWORD}@{self.hosts}/{self.database}?target_session_attrs=read-write"

    def wait_sync(self) -> None:
        """Wait until the standby streams synchronously (RuntimeError after `SYNC_WITHIN_S`)."""
        deadline = time.monotonic() + SYNC_WITHIN_S
        while (state := self.primary.psql("SELECT sync_state FROM pg_stat_replication").strip()) != "sync":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby is not synchronous after {SYNC_WITHIN_S} s ({state!r})")
            time.sleep(0.1)

    def kill_primary(self) -> list[int]:
        """SIGKILL the primary's postmaster; its pid and its backends' (they exit once they notice)."""
        postmaster = pg.postmaster_pid(self.primary)
        orphans = _children(postmaster)
        os.kill(postmaster, signal.SIGKILL)
        return [postmaster, *orphans]

    def promote(self) -> None:
        """Promote the standby (``pg_ctl promote -w``) and make it the primary, asynchronous until `rebuild`."""
        self.standby.promote()
        self.standby.psql("ALTER SYSTEM RESET synchronous_standby_names")  # commits must not wait for a standby yet
        self.standby.psql("SELECT pg_reload_conf()")
        self.primary, self.standby = self.standby, self.primary

    def rebuild(self, orphans: list[int]) -> None:
        """Make the dead old primary a synchronous standby of the new one (a fresh ``pg_basebackup -R``)."""
        deadline = time.monotonic() + ORPHANS_GONE_S
        while (left := [p for p in orphans if _alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in left:  # the old primary's own backends, still there past the bound
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.standby.data)
        # the dead postmaster's socket lock names its pid, which may linger as a zombie nobody reaps yet
        # (kill(pid, 0) succeeds on one): the new postmaster would take it for a live one and refuse to start
        for stale in glob.glob(os.path.join(self.standby.sockets, f".s.PGSQL.{self.standby.port}*")):
            os.unlink(stale)
        self.standby.run(
            "pg_basebackup",
            "-D",
            self.standby.data,
            "-h",
            self.primary.sockets,
            "-p",
            str(self.primary.port),
            "-U",
            "postgres",
            "-R",
            "-X",
            "stream",
            "--no-sync",
            "--checkpoint=fast",
        )
        try:
            self.standby.start()
        except subprocess.CalledProcessError as exc:
            with open(os.path.join(self.standby.base, "server.log")) as f:
                raise RuntimeError(f"the rebuilt standby did not start: {exc.stderr}{f.read()[-2000:]}") from exc
        self.primary.psql(f"ALTER SYSTEM SET synchronous_standby_names = '{SYNC_NAME}'")
        self.primary.psql("SELECT pg_reload_conf()")
        self.wait_sync()

    def failover(self) -> dict[str, Any]:
        """Kill the primary, promote the standby, rebuild the old primary as the standby; wall-clock times."""
        log = os.path.join(self.standby.base, "server.log")
        seen = os.path.getsize(log)
        killed = time.time()
        orphans = self.kill_primary()
        self.promote()
        promoted = time.time()
        with open(log, errors="replace") as f:  # what the promoted node said meanwhile: why a slow one was slow
            f.seek(seen)
            said = f.read()[-3000:] if promoted - killed > SLOW_PROMOTE_S else ""
        self.rebuild(orphans)
        return {"killed": killed, "promoted": promoted, "rebuilt": time.time(), "log": said}


@contextlib.contextmanager
def pair(database: str) -> Iterator[Pair]:
    """A primary with ``database`` and a synchronous standby; both stopped and removed at the end, whatever happened.

    The cleanup of tests/pg.py (``pg_ctl stop`` and removal of each node's base
    directory) holds across failovers: a node keeps its directory and port,
    only its data directory is rebuilt.
    """
    with pg.server() as primary:
        primary.psql(f"CREATE DATABASE {database} OWNER {pg.USER}")
        with pg.replicated(primary, synchronous=True) as standby:
            # both nodes start as a standby does (cluster_name), so either can be rebuilt as one
            node = pg.Standby(primary.bindir, primary.base, primary.port, primary._as)
            p = Pair(node, standby, database)
            p.wait_sync()
            yield p


# -- measures -----------------------------------------------------------------------------------


def failover_times(failovers: list[dict[str, Any]], acks: list[float]) -> list[float | None]:
    """Per failover: seconds from the kill to the first submit that returned after it (None: none did)."""
    acks = sorted(acks)
    out: list[float | None] = []
    for f in failovers:
        i = bisect.bisect_right(acks, f["killed"])
        out.append(round(acks[i] - f["killed"], 3) if i < len(acks) else None)
    return out


def due_stretches(
    due: dict[str, float], first_start: dict[str, float], starts: list[float]
) -> list[tuple[float, float]]:
    """Stretches with a job due and no job starting, longest first: (from, to) wall-clock seconds.

    A job is due from when its ``submit`` returned (committed: a worker could
    take it) until its routine first starts. A stretch is a gap between two
    consecutive starts of any job (any attempt) in which some job was due: it
    runs from the later of the gap's start and the earliest such job's due time
    to the gap's end. A job started before its submit returned is never due.
    This bounds from above how long workers sat idle with work waiting: with
    every worker busy, a due job waits too.
    """
    starts = sorted(starts)
    jobs = sorted((d, first_start[j]) for j, d in due.items() if j in first_start and first_start[j] > d)
    waiting: list[tuple[float, float]] = []  # heap of (due, first start) of jobs due so far
    stretches = []
    k = 0
    previous = float("-inf")
    for s in starts:
        while k < len(jobs) and jobs[k][0] < s:
            heapq.heappush(waiting, jobs[k])
            k += 1
        while waiting and waiting[0][1] < s:  # started before this start: no longer due
            heapq.heappop(waiting)
        if waiting:
            stretches.append((max(previous, waiting[0][0]), s))
        previous = s
    stretches.sort(key=lambda st: st[0] - st[1])
    return stretches


def stretch_report(stretches: list[tuple[float, float]], failovers: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """The longest due-and-none-starting stretch, overall and away from any failover, and the top five."""

    def during_failover(a: float, b: float) -> bool:
        return any(a <= f["rebuilt"] and b >= f["killed"] for f in failovers)

    calm = [st for st in stretches if not during_failover(*st)]
    return {
        "max_due_idle_s": round(stretches[0][1] - stretches[0][0], 3) if stretches else 0.0,
        "max_due_idle_outside_failovers_s": round(calm[0][1] - calm[0][0], 3) if calm else 0.0,
        "due_idle_over_1s": sum(1 for a, b in stretches if b - a > 1.0),
        "longest_due_idle": [
            {"at_s": round(a - t0, 1), "s": round(b - a, 3), "failover": during_failover(a, b)}
            for a, b in stretches[:5]
        ],
    }


OUTCOME_LOG_SQL = """
CREATE TABLE IF NOT EXISTS soak_outcomes (id TEXT NOT NULL, state TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
CREATE OR REPLACE FUNCTION soak_log_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO soak_outcomes VALUES (NEW.id, NEW.state, extract(epoch FROM clock_timestamp()));
    RETURN NULL;
END $$;
DROP TRIGGER IF EXISTS soak_outcome ON leakypool_jobs;
CREATE TRIGGER soak_outcome AFTER UPDATE ON leakypool_jobs FOR EACH ROW
    WHEN (NEW.state IN ('succeeded', 'failed') AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION soak_log_outcome();
"""
"""Log each job's final outcome in the transaction that commits it: a start after it ran a committed outcome again."""


async def install_outcome_log(url: str) -> None:
    """Create the store's tables (opening it) and the trigger that logs committed outcomes."""
    import asyncpg

    from pool._jobs._stores._open import open_store

    store = open_store(url)
    assert store is not None
    await store.open()
    await store.close()
    db = await asyncpg.connect(url)
    try:
        await db.execute(OUTCOME_LOG_SQL)
    finally:
        await db.close()


def ran_after_outcome(outcomes: dict[str, float], starts: dict[str, list[float]]) -> list[str]:
    """Jobs with a start logged after their final outcome committed (`OUTCOME_LOG_SQL`): must be none.

    The trigger's time precedes its commit, but no attempt can start in
    between: the outcome's update holds the row until it commits, and a lease
    taken earlier by another process would have made the update miss (it
    matches the owner).
    """
    return sorted(j for j, at in outcomes.items() if any(s > at for s in starts.get(j, ())))
