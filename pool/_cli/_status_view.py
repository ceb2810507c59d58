"""``leakypool status ADDRESS``: a live terminal view of a pool's ``/status`` (the ``status`` extra: rich).

    leakypool status 127.0.0.1:9100            # refreshed in place until Ctrl-C
    leakypool status http://host:9100 --once   # one frame
    leakypool status 127.0.0.1:9100 --json     # the data itself

The view only reads ``/status`` over HTTP (the standard library's urllib),
so it runs anywhere the pool's observation port is reachable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, Final

from ._columns import Column, one_line_table

REFRESH_S: Final[float] = 1.0
"""How often the live view reads the pool again."""

BAR_WIDTH: Final[int] = 20
"""The occupancy bar's cells in a terminal of `WIDE_COLUMNS` or more."""

NARROW_BAR_WIDTH: Final[int] = 10
"""The bar's cells in a narrower terminal (80 columns: the bar must leave room for the other columns)."""

WIDE_COLUMNS: Final[int] = 100

WORKER_COLUMNS: Final[tuple[Column, ...]] = (
    Column("uid"),
    Column("address", drop=2, cut_to=12),
    Column("in flight / capacity"),
    Column("idle s", drop=5, justify="right"),
    Column("memory", drop=4, justify="right"),
    Column("pid", drop=3, justify="right"),
)
"""The workers table: uid and occupancy are never cut; the address is cut with an ellipsis; in a narrow
terminal the idle time goes first, then memory, the pid, the address (80 columns drop the idle time)."""

QUEUE_COLUMNS: Final[tuple[Column, ...]] = (
    Column("limit", cut_to=16),
    Column("running", justify="right"),
    Column("waiting", justify="right"),
)
"""The queues table: a long queue or key name is cut with an ellipsis; the counts never."""


def status_url(address: str) -> str:
    """``HOST:PORT`` or a URL -> the ``/status`` URL (a query, e.g. ``?token=``, is kept)."""
    url = address if "://" in address else f"http://{address}"
    url, mark, query = url.partition("?")
    return url.rstrip("/") + ("" if url.rstrip("/").endswith("/status") else "/status") + mark + query


def fetch(url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The pool's ``/status`` document.

    Raises:
        OSError: unreachable, or not a pool's observation port (one line).
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the URL the user typed for their own pool's /status
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise OSError(f"{url}: HTTP {exc.code} (is this a pool's metrics port?)") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise OSError(f"{url}: {getattr(exc, 'reason', exc)}") from None
    except ValueError as exc:
        raise OSError(f"{url}: not JSON ({exc})") from None


def _bar(used: int, capacity: int, cells: int = BAR_WIDTH) -> str:
    if capacity <= 0:
        return f"{used} (no cap)"
    filled = round(cells * min(used, capacity) / capacity)
    return "█" * filled + "░" * (cells - filled) + f" {used}/{capacity}"


def _mib(value: Any) -> str:
    return "-" if not value else f"{value / 2**20:.0f} MiB"


def render(status: dict[str, Any], source: str, width: int = 80) -> Any:
    """One frame of the view, as a rich renderable: every table one line per row at ``width`` columns."""
    from rich.console import Group
    from rich.text import Text

    calls, rates = status.get("calls", {}), status.get("rates", {})
    counts = (
        f"{len(status.get('workers', []))} workers · {calls.get('running', 0)} running · "
        f"{calls.get('waiting_for_worker', 0) + calls.get('waiting_for_limits', 0)} waiting · "
        f"{rates.get('calls_per_s', 0):.1f} calls/s · {calls.get('rejected', 0)} rejected"
    )
    gap = "  " if len("leakypool ") + len(source) + 2 + len(counts) <= width else "\n"
    header = Text.assemble(("leakypool ", "bold"), (source, "cyan"), gap, counts)
    cells = BAR_WIDTH if width >= WIDE_COLUMNS else NARROW_BAR_WIDTH
    rows = []
    for w in status.get("workers", []):
        in_flight = w.get("in_flight")
        rows.append(
            (
                f"{w['uid'][:8]}…{w['uid'][-4:]}" + ("*" if w.get("local") else ""),
                w.get("address", ""),
                "?" if in_flight is None else _bar(in_flight, w.get("capacity") or 0, cells),
                "-" if w.get("idle_s") is None else f"{w['idle_s']:.1f}",
                _mib(w.get("memory")),
                str(w.get("pid", "")),
            )
        )
    workers = one_line_table(
        WORKER_COLUMNS, rows, width, title="workers (lowest uid first; * spawned by the pool)", title_justify="left"
    )
    parts: list[Any] = [header, workers]
    queues = status.get("queues") or {}
    if queues:
        limits = [(name, str(q["running"]), str(q["waiting"])) for name, q in sorted(queues.items())]
        parts.append(one_line_table(QUEUE_COLUMNS, limits, width, title="queues and keys", title_justify="left"))
    jobs = status.get("jobs")
    if jobs is not None:
        parts.append(Text("jobs: " + "  ".join(f"{state} {n}" for state, n in sorted(jobs.items()))))
    if status.get("paused"):
        parts.append(Text("paused queues: " + ", ".join(status["paused"]), style="bold yellow"))
    return Group(*parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="leakypool status", description="A live view of a running pool.")
    parser.add_argument("address", help="the pool's metrics port: HOST:PORT or a URL")
    parser.add_argument("--once", action="store_true", help="print one frame and exit")
    parser.add_argument("--json", action="store_true", help="print the /status JSON and exit")
    parser.add_argument("--interval", type=float, default=REFRESH_S, help="seconds between refreshes (default 1)")
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error(f"--interval: expected seconds > 0, got {args.interval}")
    url = status_url(args.address)
    try:
        if args.json:
            print(json.dumps(fetch(url), indent=2))
            return 0
        try:
            from rich.console import Console
            from rich.live import Live
        except ImportError:
            print(
                "leakypool status: the view needs rich: pip install 'leakypool[status]' (or use --json)",
                file=sys.stderr,
            )
            return 2
        console = Console()
        if args.once:
            console.print(render(fetch(url), args.address, console.width))
            return 0
        first = render(fetch(url), args.address, console.width)
        with Live(first, console=console, auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render(fetch(url), args.address, console.width), refresh=True)
    except OSError as exc:
        print(f"leakypool status: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
