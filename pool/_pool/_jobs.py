"""The job side of `WorkerPool`: ``jobs``, ``submit`` and ``schedule``, on its scheduler.

A pool with a store runs a `Scheduler` (pool._jobs, built by `_layers.job_scheduler`) that places
the store's due jobs through the same `CallPath` as calls; `PoolJobs`, an object the pool owns,
serves its job methods.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from .._call import CallRecord
from .._errors import ConfigError, PoolClosed
from .._routine import CallOptions, Routine

if TYPE_CHECKING:
    from .._jobs import Job, Jobs
    from ._layers import Layers


class PoolJobs:
    """`WorkerPool`'s durable jobs: the pool's methods of the same names, on its scheduler (None without a store)."""

    def __init__(self, layers: Layers) -> None:
        self._layers = layers

    @property
    def has_store(self) -> bool:
        """Whether the pool has a job store (``store=`` / ``LEAKYPOOL_STORE``)."""
        return self._layers.scheduler is not None

    @property
    def jobs(self) -> Jobs:
        """The pool's durable jobs: ``await pool.jobs.get(id)``, ``.list(state)``, ``.counts()``, ``.pause(queue)``.

        Raises:
            ConfigError: the pool has no store (``store=`` / ``LEAKYPOOL_STORE``).
        """
        if self._layers.scheduler is None:
            raise ConfigError(
                "jobs need a store: WorkerPool(store='sqlite:///PATH') or LEAKYPOOL_STORE (no store is set)"
            )
        return self._layers.scheduler.jobs

    def submit(self, task: CallRecord, options: CallOptions) -> Coroutine[Any, Any, Job]:
        """Commit a job for ``task`` (see `pool.Routine.submit`): await it (the book's own coroutine: one frame less
        on each job's way).

        Raises:
            PoolClosed: the pool is not open.
        """
        if self._layers.path.state != "open":
            raise PoolClosed(f"{task.name}() was submitted to a pool that is {self._layers.path.state}")
        return self.jobs.submit(task, options)

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
        if self._layers.scheduler is None or self._layers.path.state != "open":
            raise ConfigError("schedule: needs an open pool with a store (inside async with WorkerPool(store=...))")
        if not isinstance(tz, str):
            raise ConfigError(f"tz: expected an IANA time zone name like 'Europe/Paris', got {tz!r}")
        task = routine.task(tuple(args), dict(kwargs or {}))
        return self._layers.scheduler.schedules.add(task, routine.call_options, cron, tz)
