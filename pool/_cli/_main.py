"""The ``leakypool`` command: ``leakypool status ADDRESS``, ``leakypool jobs STORE_URL ...``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

USAGE = (
    "usage: leakypool status ADDRESS [--once | --json] [--interval S]\n"
    "       leakypool jobs STORE_URL [--json] list|show|retry|cancel|purge ...\n"
    "       leakypool jobs STORE_URL pause NAME | resume NAME | paused"
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    if args[0] == "status":
        from ._status_view import main as status

        return status(args[1:])
    if args[0] == "jobs":
        from ._pause import VERBS

        if len(args) > 2 and args[2] in VERBS:  # pause|resume|paused (issue #25)
            from ._pause import main as pauses

            return pauses(args[1:])
        from ._jobs import main as jobs

        return jobs(args[1:])
    print(f"leakypool: unknown command {args[0]!r}\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
