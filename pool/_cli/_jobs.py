"""``leakypool jobs STORE_URL ...``: what an operator does with jobs without writing Python.

    leakypool jobs sqlite:///var/lib/app/jobs.db list --state failed --routine app.convert
    leakypool jobs postgresql://... show JOB_ID
    leakypool jobs URL retry JOB_ID            # a failed or cancelled job runs again, its history kept
    leakypool jobs URL cancel JOB_ID
    leakypool jobs URL purge --older-than 30d  # finished jobs only, in bounded batches
    leakypool jobs URL sign                    # seal the rows an older release wrote (a migration step)

Tables need rich (the ``status`` extra); ``--json`` prints the data itself.
A bad argument, an unknown job or an unusable store is one line on stderr
and a non-zero exit status (2: bad usage or store, 1: the job is not there
or not in a state the verb applies to).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any, Final, NoReturn

from .._base import redacted
from .._config import default_secret_file, indirect
from .._errors import ConfigError, StoreError
from .._jobs import (
    ACTIVE_STATES,
    PURGE_BATCH,
    TERMINAL_STATES,
    JobRecord,
    MaintainedStore,
    ResealableStore,
    open_store,
    open_waiting,
    reseal,
)
from .._transport import Seal, SecretSource
from ._columns import Column, one_line_table

_UNITS: Final[dict[str, float]] = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw]?)$")


class _Parser(argparse.ArgumentParser):
    """Bad usage is one line (and exit status 2), not argparse's usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"leakypool jobs: {message} (see leakypool jobs STORE_URL --help)\n")


def _age(text: str) -> float:
    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--older-than: ")) from None


class _Refused(Exception):
    """The verb does not apply (no such job, wrong state): exit status 1."""


def parse_age(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` -> seconds.

    Raises:
        ValueError: anything else (one line, with the expected form).
    """
    match = _AGE.match(text.strip())
    if match is None:
        raise ValueError(f"--older-than: expected an age like 90s, 15m, 12h, 7d or 2w, got {text!r}")
    return float(match[1]) * _UNITS[match[2] or "s"]


def _when(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat(timespec="milliseconds")


def _short(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S")


def as_dict(record: JobRecord) -> dict[str, Any]:
    """A job as JSON-ready data (times in ISO 8601 UTC; the payload and the pickled result left out)."""
    return {
        "id": record.id,
        "routine": record.routine,
        "state": record.state,
        "attempts": record.attempts,
        "max_attempts": record.max_attempts,
        "priority": record.priority,
        "error": redacted(record.error) if record.error else record.error,  # a terminal is no place for a password
        "created_at": _when(record.created_at),
        "run_at": _when(record.next_at),
        "started_at": _when(record.started_at),
        "finished_at": _when(record.finished_at),
        "deadline": _when(record.deadline),
        "owner": record.owner,
        "queue": record.queue,
        "key": record.key,
        "workflow": record.workflow,
        "cancel_requested": record.cancel_requested,
        "result_bytes": None if record.outcome is None else len(record.outcome),
    }


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="leakypool jobs", description="Look at and act on a store's jobs.")
    parser.add_argument(
        "store", help="the store URL: sqlite:///PATH or postgresql://...; or @FILE, env:NAME holding one (a password)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    listing = verbs.add_parser("list", help="jobs, newest first")
    listing.add_argument("--state", choices=sorted(ACTIVE_STATES | TERMINAL_STATES))
    listing.add_argument("--routine", help="the routine's qualified name, e.g. app.convert")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    for verb, text in [
        ("show", "one job in full"),
        ("retry", "run a failed or cancelled job again"),
        ("cancel", "cancel a pending or running job"),
    ]:
        verbs.add_parser(verb, help=text).add_argument("job_id")
    purge = verbs.add_parser("purge", help="delete finished jobs older than an age")
    purge.add_argument("--older-than", required=True, type=_age, help="e.g. 30d, 12h, 90s")
    sign = verbs.add_parser(
        "sign",
        help="seal the payloads and outcomes an older release wrote (unsealed), vouching for them: "
        "only after checking that no one else could write the store",
    )
    sign.add_argument("--state", choices=sorted(ACTIVE_STATES | TERMINAL_STATES), help="only jobs in this state")
    sign.add_argument(
        "--secret-file",
        default="",
        help="the secret the pools on this store hold (default: LEAKYPOOL_SECRET, LEAKYPOOL_SECRET_FILE, "
        "else this user's own secret file)",
    )
    for sub in verbs.choices.values():
        sub.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    return parser


async def run(args: argparse.Namespace) -> Any:
    """Do the verb against the store; what to print (records, a record, or a summary)."""
    try:
        args.store = indirect(args.store)  # a URL with a password is no argument: every user reads a command line
    except ValueError as exc:
        raise ConfigError(f"store {args.store}: {exc}") from None
    if args.store.startswith("sqlite:///") and not os.path.exists("/" + args.store[len("sqlite:///") :].lstrip("/")):  # noqa: ASYNC240 - a command-line tool, one stat before it opens the store
        raise ConfigError(f"store {args.store}: no such file (a typo? the jobs command never creates a store)")
    store = open_store(args.store)
    assert store is not None  # noqa: S101 - an invariant, stated for the type checker
    if not isinstance(store, MaintainedStore):
        raise ConfigError(f"store {args.store}: does not support the jobs command")
    await open_waiting(store)
    try:
        if args.verb == "list":
            if args.limit < 1:
                raise ConfigError(f"--limit: expected an integer >= 1, got {args.limit}")
            return await store.select(args.state, args.routine, args.limit)
        if args.verb == "purge":
            now, total = time.time(), 0
            while (n := await store.purge(now - args.older_than, PURGE_BATCH)) == PURGE_BATCH:
                total += n
            return {"purged": total + n, "finished_before": _when(now - args.older_than)}
        if args.verb == "sign":
            return await _sign(store, args.state, _seal(args.secret_file))
        record = await store.get(args.job_id)
        if record is None:
            raise _Refused(f"no job {args.job_id!r} in {store!r}")
        if args.verb == "retry":
            if record.state not in ("failed", "cancelled"):
                raise _Refused(f"job {record.id} is {record.state}: only a failed or cancelled job can be retried")
            record = await store.requeue(record.id, time.time())
        elif args.verb == "cancel":
            if record.state in TERMINAL_STATES:
                raise _Refused(f"job {record.id} is already {record.state}")
            record = await store.cancel(record.id, time.time())
        return record
    finally:
        await store.close()


SIGN_LIMIT: Final[int] = 1 << 40
"""Rows ``sign`` reads at most per state (all of them, in practice)."""


def _seal(secret_file: str) -> Seal:
    """The seal of the secret given, else of the one the pools read (``LEAKYPOOL_SECRET``, ``..._FILE``, the user's own)."""
    environ = os.environ
    source = (
        SecretSource(path=secret_file)
        if secret_file
        else SecretSource(
            environ.get("LEAKYPOOL_SECRET", ""),
            environ.get("LEAKYPOOL_SECRET_FILE", ""),
            default_path=default_secret_file(),
        )
    )
    # This user's own file is made if missing, as the pools of this user would make it (and then find it).
    if not source.secrets(create=True):
        raise ConfigError(f"sign: no secret to seal with ({source.describe()})")
    return Seal(source.secrets, source.describe())


async def _sign(store: MaintainedStore, state: str | None, seal: Seal) -> dict[str, Any]:
    """Seal every unsealed payload and outcome (of jobs in ``state``, or all); what was done, as a summary."""
    if not isinstance(store, ResealableStore):
        raise ConfigError(f"sign: {store!r} cannot rewrite its rows")
    signed = sealed_already = 0
    for each in [state] if state else sorted(ACTIVE_STATES | TERMINAL_STATES):
        for record in await store.select(each, None, SIGN_LIMIT):
            payload = reseal(record.id, "payload", record.payload, seal)
            outcome = reseal(record.id, "outcome", record.outcome, seal) if record.outcome else None
            if payload is None and outcome is None:
                sealed_already += 1
                continue
            was = (record.payload, record.outcome)
            if await store.reseal(record.id, payload or record.payload, outcome or record.outcome, was):
                signed += 1
    return {"signed": signed, "sealed_already": sealed_already, "secret": seal.where}


LIST_COLUMNS: Final[tuple[Column, ...]] = (
    Column("id"),
    Column("routine"),
    Column("state"),
    Column("attempts", drop=2, justify="right"),
    Column("priority", drop=5, justify="right"),
    Column("created (UTC)", drop=4),
    Column("run at (UTC)", drop=3),
    Column("error", drop=1, cut_to=12),
)
"""``list``'s columns. id, routine and state are never cut; the error is cut with an ellipsis; when the
terminal is narrow, priority goes first, then the creation time (the list is newest first anyway), the
run-at time, the attempts and last the error (80 columns keep id, routine, state, and the error, cut)."""

SHOW_COLUMNS: Final[tuple[Column, ...]] = (Column("field"), Column("value", cut_to=8))
"""``show``'s two columns: a value too long for the terminal is cut (the full error follows the table)."""


def render(result: Any, width: int = 80) -> Any:
    """A rich renderable for ``result``, one line per row at ``width`` columns (rich imported here)."""
    from rich.console import Group
    from rich.text import Text

    if isinstance(result, dict) and "signed" in result:
        return (
            f"sealed {result['signed']} job(s) with {result['secret']}; {result['sealed_already']} were sealed already"
        )
    if isinstance(result, dict):
        return f"purged {result['purged']} finished job(s) that ended before {result['finished_before']}"
    if isinstance(result, JobRecord):
        fields = [
            (field, "" if value is None else " ".join(str(value).split())) for field, value in as_dict(result).items()
        ]
        table = one_line_table(SHOW_COLUMNS, fields, width, show_header=False, title=f"job {result.id}")
        value_width = table.columns[1].width or 0
        error = redacted(result.error) if result.error else ""
        if error and (len(error) > value_width or "\n" in error):
            return Group(table, Text(f"error: {error}"))  # cut in the table: here in full, wrapped
        return table
    rows = [
        (
            record.id,
            record.routine,
            record.state,
            f"{record.attempts}/{record.max_attempts}",
            str(record.priority),
            _short(record.created_at),
            _short(record.next_at),
            redacted(record.error.splitlines()[0]) if record.error else "",
        )
        for record in result
    ]
    return one_line_table(LIST_COLUMNS, rows, width, title=f"{len(result)} job(s), newest first")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``leakypool jobs``; the exit status."""
    args = _parser().parse_args(argv)
    try:
        result = asyncio.run(run(args))
    except (ConfigError, StoreError) as exc:
        print(f"leakypool jobs: {exc}", file=sys.stderr)
        return 2
    except _Refused as exc:
        print(f"leakypool jobs: {exc}", file=sys.stderr)
        return 1
    if args.json:
        data = (
            result
            if isinstance(result, dict)
            else (as_dict(result) if isinstance(result, JobRecord) else [as_dict(r) for r in result])
        )
        print(json.dumps(data, indent=2))
        return 0
    try:
        from rich.console import Console
    except ImportError:
        print("leakypool jobs: tables need rich: pip install 'leakypool[status]' (or use --json)", file=sys.stderr)
        return 2
    console = Console()
    console.print(render(result, console.width))
    return 0
