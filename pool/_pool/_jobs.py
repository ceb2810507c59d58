"""The job side of `WorkerPool`: its store and scheduler, and ``jobs``, ``submit`` and ``schedule``.

A pool with a store runs a `Scheduler` (pool._jobs) that places the
store's due jobs through the same `CallPath` as calls. This module builds
it from the pool's settings and gives `WorkerPool` its job methods, so the
pool's own module keeps to wiring the layers and its lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._call._task import Task
from .._config._settings import PoolConfig
from .._dispatch._path import CallPath
from .._errors import ConfigError, PoolClosed
from .._routine import CallOptions, Routine

if TYPE_CHECKING:
    from .._jobs import Job, Jobs, JobStore, Scheduler


def job_scheduler(
    store: str | JobStore | None,
    config: PoolConfig,
    path: CallPath,
    grow: Callable[[], Any],
    can_run: Callable[[], bool],
) -> Scheduler | None:
    """The scheduler of a pool with a store (``store=`` object, or the ``store`` setting), else None.

    Args:
        store: ``WorkerPool(store=...)``: a `pool.JobStore` object, a URL, or None.
        config: The pool's settings (``config.store`` is the URL, argument or ``LEAKYPOOL_STORE``).
        path: Where job attempts are placed.
        grow: Asks for one more worker when a job finds none with room.
        can_run: Whether the pool has, or may start, any worker at all.
    """
    given = store if store is not None and not isinstance(store, str) else config.store
    if not given:
        return None
    from .._jobs import Scheduler, open_store  # sqlite3 and the rest load only for a pool with a store

    job_store = open_store(given)
    assert job_store is not None  # noqa: S101 - an invariant, stated for the type checker
    return Scheduler(
        job_store,
        path.place_job,
        grow,
        can_run,
        lease_ttl=config.lease_ttl,
        default_deadline=config.dispatch_deadline,
        max_pending=config.max_pending,
        keep_finished=config.keep_finished,
        store_retry=config.store_retry,
    )


class PoolJobs:
    """`WorkerPool`'s durable-job methods (its ``_scheduler`` is None without a store)."""

    _scheduler: Scheduler | None
    _path: CallPath

    @property
    def has_store(self) -> bool:
        """Whether the pool has a job store (``store=`` / ``LEAKYPOOL_STORE``)."""
        return self._scheduler is not None

    @property
    def jobs(self) -> Jobs:
        """The pool's durable jobs: ``await pool.jobs.get(id)``, ``.list(state)``, ``.counts()``, ``.pause(queue)``.

        Raises:
            ConfigError: the pool has no store (``store=`` / ``LEAKYPOOL_STORE``).
        """
        if self._scheduler is None:
            raise ConfigError(
                "jobs need a store: WorkerPool(store='sqlite:///PATH') or LEAKYPOOL_STORE (no store is set)"
            )
        return self._scheduler.jobs

    async def submit(self, task: Task, options: CallOptions) -> Job:
        """Commit a job for ``task`` (see `pool.Routine.submit`)."""
        if self._path.state != "open":
            raise PoolClosed(f"{task.name}() was submitted to a pool that is {self._path.state}")
        return await self.jobs.submit(task, options)

    def schedule(
        self,
        routine: Routine[Any, Any],
        cron: str,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        tz: str = "UTC",
    ) -> str:
        """Run ``routine(*args, **kwargs)`` as a job at every slot of ``cron``.

        Every process on the store may schedule the same thing: each slot runs
        once in all (its job id is ``NAME@UNIX_SECONDS``, NAME derived from the
        routine, ``cron``, ``tz`` and the arguments). A slot missed while no
        process ran is run once at start-up (the latest one, not each), with a
        warning saying how many were missed. The routine's options (queue,
        retries, priority...) apply to each slot's job. Needs the ``cron`` extra.

        Args:
            routine: A coroutine routine.
            cron: ``"minute hour day month weekday"``, croniter's syntax (a sixth
                field, last, counts seconds: ``"* * * * * */10"``).
            args: Its positional arguments, pickled once, now.
            kwargs: Its keyword arguments, likewise.
            tz: The zone ``cron`` is read in (IANA name); default UTC.

        Returns:
            The schedule's name.

        Raises:
            ConfigError: no store, a pool not open, a bad expression or zone, croniter missing.
            SerializationError: an argument cannot be pickled.
        """
        if not isinstance(routine, Routine) or routine.generator:
            raise ConfigError(f"schedule: expected a coroutine @pool.routine, got {routine!r}")
        if self._scheduler is None or self._path.state != "open":
            raise ConfigError("schedule: needs an open pool with a store (inside async with WorkerPool(store=...))")
        if not isinstance(tz, str):
            raise ConfigError(f"tz: expected an IANA time zone name like 'Europe/Paris', got {tz!r}")
        task = routine.task(tuple(args), dict(kwargs or {}))
        return self._scheduler.schedules.add(task, routine.call_options, cron, tz)
