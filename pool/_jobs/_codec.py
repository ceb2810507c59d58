"""A job's payload: the call it stands for, as the store keeps it (opaque to the store).

The payload carries what a `Task` carries (the routine's wire form, the
pickled arguments, the limits) plus the job's retry policy. It is written
once at submission and read by whichever dispatching process runs the job,
so its format is versioned.
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Final

from .._call._task import Task
from .._errors import SerializationError
from .._transport import _wire

PAYLOAD_VERSION: Final[int] = 1
"""Bumped when the payload's fields change incompatibly."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed attempt is tried again."""

    retry_backoff: float = 1.0
    retry_on: tuple[type[BaseException], ...] = ()


def encode(task: Task, policy: RetryPolicy) -> bytes:
    """The payload of a job that runs ``task``.

    Raises:
        SerializationError: a ``retry_on`` type cannot be pickled.
    """
    fields: dict[str, Any] = {
        "name": task.name,
        "digest": task.digest,
        "blob": task.blob,
        "args": _wire.inline(task.args),  # a store keeps bytes, not descriptors
        "timeout": task.timeout,
        "queue": task.queue,
        "concurrency": task.concurrency,
        "total": task.total,
        "key": task.key,
        "workflow": task.workflow,
        "halt_on_error": task.halt_on_error,
        "plain": task.plain,
        "retry_backoff": policy.retry_backoff,
        "retry_on": _wire.dumps(policy.retry_on, what=f"retry_on of {task.name}()") if policy.retry_on else b"",
    }
    return pickle.dumps((PAYLOAD_VERSION, fields), protocol=pickle.HIGHEST_PROTOCOL)


def decode(payload: bytes) -> tuple[Task, RetryPolicy]:
    """Inverse of `encode`.

    Raises:
        SerializationError: the payload is corrupt, from a newer release, or
            its ``retry_on`` types cannot be imported here.
    """
    try:
        version, fields = pickle.loads(payload)  # noqa: S301 - a payload this pool wrote to the user's own store (docs/stores.md: who may write it may run code)
    except Exception as exc:
        raise SerializationError(f"a job's payload cannot be read: {type(exc).__name__}: {exc}") from exc
    if version != PAYLOAD_VERSION:
        raise SerializationError(f"a job's payload has version {version}; this release reads {PAYLOAD_VERSION}")
    retry_on = _wire.loads(fields["retry_on"], what="retry_on") if fields["retry_on"] else ()
    task = Task(
        name=fields["name"],
        generator=False,
        digest=fields["digest"],
        blob=fields["blob"],
        args=fields["args"],
        timeout=fields["timeout"],
        queue=fields["queue"],
        concurrency=fields["concurrency"],
        total=fields["total"],
        key=fields["key"],
        workflow=fields["workflow"],
        halt_on_error=fields["halt_on_error"],
        plain=fields.get("plain", False),  # absent from payloads written before plain routines
    )
    return task, RetryPolicy(fields["retry_backoff"], retry_on)
