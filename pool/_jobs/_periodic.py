"""Periodic jobs: ``WorkerPool.schedule(routine, cron=...)`` submits one job per slot of a cron expression.

    start-up:  the latest slot <= now; the store's last slot for this schedule
               none yet           -> record it as the start (nothing from the past runs)
               older (missed)     -> submit the latest missed slot once, and log how many were missed
    then:      sleep until the next slot -> store.schedule_slot(slot, job) -> sleep until the next ...

Every process on the store runs the same loop; the store records each
schedule's last slot and inserts the slot's job in the same transaction,
so of all the processes that wake for one slot, exactly one submits it.
The slot's job id is ``NAME@UNIX_SECONDS``, NAME derived from the routine,
the expression, the time zone and the arguments: processes that schedule
the same thing share it. croniter (the ``cron`` extra) is imported only
when a schedule is made. Times are UTC unless ``tz`` names a zone.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Final

from .._call import CallRecord
from .._errors import ConfigError, StoreError
from .._transport import wire
from ._attempt import Outage
from ._job import JobOptions, Jobs
from ._store import MaintainedStore

_log = logging.getLogger("leakypool.jobs")

MISSED_COUNT_MAX: Final[int] = 10_000
"""Missed slots counted at most for the start-up message (a per-second schedule down for a day says 10000+)."""

LATE_SLOT_MAX_S: Final[float] = 1.0
"""A slot more than this late when its turn comes (the process stalled) is skipped, with a warning."""


def _croniter() -> Any:
    try:
        from croniter import croniter
    except ImportError:
        raise ConfigError("schedule() needs croniter: pip install 'leakypool[cron]'") from None
    return croniter


def _zone(tz: str) -> datetime.tzinfo:
    if tz == "UTC":
        return datetime.UTC
    import zoneinfo

    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"tz: expected an IANA time zone name like 'Europe/Paris', got {tz!r}") from None


class Slots:
    """The slots of ``cron`` in ``tz`` (I/O-free): the latest at or before a time, the next after one.

    Raises:
        ConfigError: the expression does not parse, or the zone is unknown (one line).
    """

    def __init__(self, cron: str, tz: str = "UTC") -> None:
        croniter = _croniter()
        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise ConfigError(
                f"cron: expected 'minute hour day month weekday' (and optionally seconds, last), got {cron!r}"
            )
        self.cron = cron
        self.zone = _zone(tz)
        self._croniter = croniter

    def _at(self, when: float) -> Any:
        return self._croniter(self.cron, datetime.datetime.fromtimestamp(when, self.zone))

    def next_after(self, when: float) -> float:
        """The first slot strictly after ``when`` (Unix seconds)."""
        return float(self._at(when).get_next(float))

    def latest(self, when: float) -> float:
        """The last slot at or before ``when``."""
        second = math.floor(when)  # slots fall on whole seconds; a fraction would be rounded, not floored
        after = self.next_after(second - 1)
        return after if after <= second else float(self._at(second).get_prev(float))

    def following(self, slot: float, now: float) -> tuple[float, int]:
        """The slot to claim after ``slot``, and how many slots were skipped to reach it (I/O-free).

        Normally the next slot (0 skipped). A slot already over `LATE_SLOT_MAX_S` late at ``now`` (this
        process stalled: an overloaded machine, a paused VM) is skipped, left to the other processes,
        and counted so that the caller can say so.
        """
        following = self.next_after(slot)
        if following >= now - LATE_SLOT_MAX_S:
            return following, 0
        return self.next_after(now - LATE_SLOT_MAX_S), self.count_between(slot, now - LATE_SLOT_MAX_S)

    def count_between(self, after: float, until: float) -> int:
        """Slots in ``(after, until]``, counted up to `MISSED_COUNT_MAX`."""
        n, it = 0, self._at(after)
        while n < MISSED_COUNT_MAX and it.get_next(float) <= until:
            n += 1
        return n


def schedule_name(task: CallRecord, cron: str, tz: str) -> str:
    """``cron:ROUTINE:DIGEST``: the same routine, expression, zone and arguments give the same name everywhere."""
    digest = hashlib.sha256(b"\0".join([cron.encode(), tz.encode(), task.digest, wire.inline(task.args)])).hexdigest()[
        :12
    ]
    return f"cron:{task.name}:{digest}"


class Periodic:
    """One schedule, run by one process (every process on the store runs its own; the store picks one per slot).

    Args:
        jobs: Builds the slot jobs (`Jobs.new_job`).
        task: The call each slot runs.
        options: The routine's options (queue, retries, priority... apply to every slot's job).
        slots: When.
        wake: Lease now (a slot's job was just inserted).
    """

    def __init__(
        self, jobs: Jobs, task: CallRecord, options: JobOptions, slots: Slots, tz: str, wake: Callable[[], None]
    ) -> None:
        if not isinstance(jobs.store, MaintainedStore):
            raise ConfigError(f"schedule: the store {jobs.store!r} cannot record schedules")
        self.name = schedule_name(task, slots.cron, tz)
        self._jobs = jobs
        self._store = jobs.store
        self._task = task
        self._options = options
        self.slots = slots
        self._wake = wake

    async def _claim(self, slot: float) -> float | None:
        job = self._jobs.new_job(self._task, self._options, time.time(), job_id=f"{self.name}@{slot:.0f}", due=slot)
        previous = await self._store.schedule_slot(self.name, slot, job)
        self._wake()  # whoever inserted it, it is in the store now: lease it if there is room here
        return previous

    async def start(self) -> float:
        """Record the schedule's start, or run its latest missed slot once; the next slot to wait for."""
        now = time.time()
        latest = self.slots.latest(now)
        last = await self._store.schedule_slot(self.name, latest, None)
        if last is not None and last < latest:
            missed = self.slots.count_between(last, latest)
            if await self._claim(latest) in (None, last):  # this process submitted it, not another one
                _log.warning(
                    "schedule %s (%s) missed %d slot(s) since %s while no process ran; running the latest (%s) once",
                    self.name,
                    self.slots.cron,
                    missed,
                    _iso(last),
                    _iso(latest),
                )
        return self.slots.next_after(max(now, latest))

    async def run(self) -> None:
        """Submit each slot once it comes (sleeping until it: no polling), until cancelled."""
        outage = Outage(f"running schedule {self.name}")
        while True:
            try:
                slot = await self.start()
                break
            except StoreError as exc:
                outage.failed(exc)
                await asyncio.sleep(outage.delay())
        outage.over()
        while True:
            await asyncio.sleep(max(0.0, slot - time.time()))
            try:
                await self._claim(slot)
            except StoreError as exc:
                outage.failed(exc)  # the slot is left to the other processes, or missed (and logged at start-up)
            else:
                outage.over()
            slot = self._following(slot)

    def _following(self, slot: float) -> float:
        following, skipped = self.slots.following(slot, time.time())
        if skipped:
            _log.warning(
                "schedule %s (%s): this process stalled; skipped %d slot(s) after %s over %gs late "
                "(left to the other processes on the store, if any); next %s",
                self.name,
                self.slots.cron,
                skipped,
                _iso(slot),
                LATE_SLOT_MAX_S,
                _iso(following),
            )
        return following


def _iso(when: float) -> str:
    return datetime.datetime.fromtimestamp(when, datetime.UTC).isoformat(timespec="seconds")


class Schedules:
    """A process's schedules (``WorkerPool.schedule``), each a task this owner ends when the pool closes."""

    def __init__(self, jobs: Jobs, wake: Callable[[], None]) -> None:
        from .._base import TaskOwner

        self._jobs = jobs
        self._wake = wake
        self._tasks = TaskOwner("job schedules", _log)
        self.names: list[str] = []

    def add(self, task: CallRecord, options: JobOptions, cron: str, tz: str) -> str:
        """Start submitting ``task`` at each slot of ``cron``; the schedule's name.

        Raises:
            ConfigError: a bad expression or zone, croniter missing, or the same schedule twice here.
        """
        periodic = Periodic(self._jobs, task, options, Slots(cron, tz), tz, self._wake)
        if periodic.name in self.names:
            raise ConfigError(f"schedule: {task.name}() is already scheduled with {cron!r} and these arguments")
        self.names.append(periodic.name)
        self._tasks.spawn(periodic.run(), name=f"schedule {periodic.name}")
        return periodic.name

    async def aclose(self) -> None:
        await self._tasks.aclose()
