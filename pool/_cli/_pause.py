"""``leakypool jobs STORE_URL pause|resume NAME`` (and ``paused``): stop and restart a queue from a shell.

    leakypool jobs postgresql://app@db/app pause emails    # no process on the store starts its jobs now
    leakypool jobs postgresql://app@db/app resume emails   # they start again (at once on PostgreSQL)
    leakypool jobs sqlite:///var/lib/app/jobs.db paused     # the paused queues, one per line

Exit status 0 when done, 2 for bad input (one line), 1 when the store
could not be reached (one line, the password left out).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

from .._base import redacted
from .._config import indirect
from .._errors import ConfigError, StoreError
from .._jobs import PausableStore, open_store, open_waiting, queue_name

USAGE = "usage: leakypool jobs STORE_URL pause NAME | resume NAME | paused"

VERBS = ("pause", "resume", "paused")
"""The subcommands this module answers (the rest of ``leakypool jobs`` lives elsewhere)."""


def main(argv: Sequence[str]) -> int:
    """Run ``leakypool jobs STORE_URL VERB [NAME]``; the exit status."""
    args = list(argv)
    if len(args) < 2 or args[1] not in VERBS or len(args) != (2 if args[1] == "paused" else 3):
        print(f"leakypool jobs: expected STORE_URL and one of {', '.join(VERBS)}\n{USAGE}", file=sys.stderr)
        return 2
    url, verb, name = args[0], args[1], args[2] if len(args) > 2 else ""
    try:
        if verb != "paused":
            name = queue_name(name)
        if said := asyncio.run(_run(url, verb, name)):
            print(said)
    except ConfigError as exc:
        print(f"leakypool jobs: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"leakypool jobs: {exc}", file=sys.stderr)
        return 1
    return 0


async def _run(url: str, verb: str, name: str) -> str:
    try:
        url = indirect(url)  # @FILE or env:NAME: a URL with a password is no argument (issue 43)
    except ValueError as exc:
        raise ConfigError(f"store {url}: {exc}") from None
    if url.startswith("sqlite:///") and not os.path.exists("/" + url[len("sqlite:///") :].lstrip("/")):  # noqa: ASYNC240 - a command-line tool, one stat before it opens the store
        raise ConfigError(f"store {redacted(url)}: no such file (a typo? the jobs command never creates a store)")
    store = open_store(url)
    if not isinstance(store, PausableStore):
        raise ConfigError(f"store: expected a store URL (sqlite:///PATH or postgresql://...), got {redacted(url)!r}")
    await open_waiting(store)
    try:
        if verb == "pause":
            await store.pause(name)
            return f"paused queue {name!r} in {redacted(url)}: no process starts its pending jobs until it is resumed"
        if verb == "resume":
            await store.resume(name)
            return f"resumed queue {name!r} in {redacted(url)}"
        return "\n".join(await store.paused())
    finally:
        await store.close()
