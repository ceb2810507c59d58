"""A job's payload: the call it stands for, as the store keeps it (opaque to the store).

The payload carries what a `CallRecord` carries (the routine's wire form, the
pickled arguments, the limits) plus the job's retry policy. It is written
once at submission and read by whichever dispatching process runs the job,
so its format is versioned. It is code (a pickle, and a routine a worker
will run), so it is sealed with the user's secret for its job id
(`pool._transport._seal`) and its seal is checked before a byte of it is
unpickled: a row written by a database role that holds no secret never
runs (docs/stores.md, "Who may write the store").
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Final

from .._call import CallRecord
from .._errors import SerializationError
from .._transport import Seal, is_sealed, wire

PAYLOAD_VERSION: Final[int] = 1
"""Bumped when the payload's fields change incompatibly."""


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When a failed attempt is tried again."""

    retry_backoff: float = 1.0
    retry_on: tuple[type[BaseException], ...] = ()


def encode(task: CallRecord, policy: RetryPolicy, job_id: str, seal: Seal, build: str = "") -> bytes:
    """The payload of job ``job_id``, which runs ``task``, sealed for that job; ``build``: the build it is pinned
    to ("": none, it runs the build of the process that dispatches it).

    Raises:
        SerializationError: a ``retry_on`` type cannot be pickled, or there is no secret to seal with.
    """
    return seal_fields(payload_fields(task, policy, build), job_id, seal)


def payload_fields(task: CallRecord, policy: RetryPolicy, build: str = "") -> dict[str, Any]:
    """What a payload holds for ``task`` (see `encode`), before it is pickled and sealed.

    Raises:
        SerializationError: a ``retry_on`` type cannot be pickled.
    """
    return {
        "name": task.name,
        "digest": task.digest,
        "blob": task.blob,
        "args": wire.inline(task.args),  # a store keeps bytes, not descriptors
        "timeout": task.timeout,
        "queue": task.queue,
        "concurrency": task.concurrency,
        "total": task.total,
        "key": task.key,
        "workflow": task.workflow,
        "halt_on_error": task.halt_on_error,
        "plain": task.plain,
        "interpreter": task.interpreter,  # the Python its code by value was made by ("": none is)
        "build": build,
        "retry_backoff": policy.retry_backoff,
        "retry_on": wire.dumps(policy.retry_on, what=f"retry_on of {task.name}()") if policy.retry_on else b"",
    }


def seal_fields(fields: dict[str, Any], job_id: str, seal: Seal) -> bytes:
    """``fields`` (`payload_fields`) as job ``job_id``'s payload: pickled and sealed for that job.

    Raises:
        SerializationError: there is no secret to seal with.
    """
    return seal.seal(
        f"job {job_id}", "payload", pickle.dumps((PAYLOAD_VERSION, fields), protocol=pickle.HIGHEST_PROTOCOL)
    )


def decode(job_id: str, payload: bytes, seal: Seal) -> tuple[CallRecord, RetryPolicy]:
    """Inverse of `encode`: nothing is unpickled unless the payload's seal checks for ``job_id``.

    Raises:
        SerializationError: the payload was not sealed for this job under a secret held here.
        SerializationError: the payload is corrupt, from a newer release, or
            its ``retry_on`` types cannot be imported here.
    """
    fields = _opened(job_id, payload, seal)
    retry_on = wire.loads(fields["retry_on"], what="retry_on") if fields["retry_on"] else ()
    return task_of(fields), RetryPolicy(fields["retry_backoff"], retry_on)


def task_of(fields: dict[str, Any]) -> CallRecord:
    """The task a payload's ``fields`` run: what `decode` returns, and what the submitting process holds of a job it
    keeps (without reading its own payload back)."""
    return CallRecord(
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
        interpreter=_interpreter(fields),
        build=fields.get("build", ""),  # (absent before issue 54: unpinned)
    )


def _interpreter(fields: dict[str, Any]) -> str:
    """The Python a payload's code by value was made by; absent from payloads written before issue 54, whose code
    by value counts as this process's Python."""
    made_by = fields.get("interpreter")
    if made_by is None:
        made_by = wire.interpreter_of(fields["blob"]) or wire.interpreter_of(fields["args"])
    return str(made_by)


def pinned_build(job_id: str, payload: bytes, seal: Seal) -> str:
    """The build job ``job_id``'s payload is pinned to ("": none), once its seal checks (nothing else is loaded).

    Raises:
        SerializationError: the payload was not sealed for this job under a secret held here, or is corrupt.
    """
    return str(_opened(job_id, payload, seal).get("build", ""))


def _opened(job_id: str, payload: bytes, seal: Seal) -> dict[str, Any]:
    """The fields of job ``job_id``'s payload, unpickled only once its seal checks (the routine and arguments
    stay bytes)."""
    opened = seal.open(f"job {job_id}", "payload", payload)
    try:
        version, fields = pickle.loads(opened)  # noqa: S301 - sealed under the user's secret for this job: checked above
    except Exception as exc:
        raise SerializationError(f"a job's payload cannot be read: {type(exc).__name__}: {exc}") from exc
    if version != PAYLOAD_VERSION:
        raise SerializationError(f"a job's payload has version {version}; this release reads {PAYLOAD_VERSION}")
    return fields


def seal_outcome(job_id: str, outcome: bytes, seal: Seal) -> bytes:
    """A job's outcome (an ``Outcome`` message: a pickled value or exception) as the store keeps it: sealed."""
    return seal.seal(f"job {job_id}", "outcome", outcome)


def open_outcome(job_id: str, stored: bytes, seal: Seal) -> bytes:
    """The outcome message inside ``stored``, once its seal checks for ``job_id`` (before anything is unpickled).

    Raises:
        SerializationError: it was not sealed for this job's outcome under a secret held here.
    """
    return seal.open(f"job {job_id}", "outcome", stored)


def reseal(job_id: str, field: str, stored: bytes, seal: Seal) -> bytes | None:
    """``stored`` sealed for ``field`` of ``job_id`` if it carries no seal yet (an older release's row), else None.

    The migration step behind ``leakypool jobs STORE_URL sign``: the
    operator vouches for the rows an older release wrote; rows that already
    carry a seal are left as they are (a forged seal stays forged).
    """
    if is_sealed(stored):
        return None
    return seal.seal(f"job {job_id}", field, stored)
