"""Tests for ``leakypool jobs``'s tables (`pool._cli._jobs`): one line per job at 80 and 120 columns.

rich wraps a table too wide for the terminal cell by cell ("rou/tin/e"), and
a pipe counts as 80 columns. The verbs themselves run end to end in
tests/integration/jobs/test_job_lifecycle.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
import time

import pytest
from rich.console import Console

from pool._cli._jobs import render
from pool._jobs._store import JobRecord, NewJob
from pool._jobs._stores._sqlite import SQLiteStore

NOW = 1_700_000_000.0
ERROR = "ValueError: could not convert /var/lib/app/uploads/2024/invoice-000123.pdf: the file is not a PDF"


def record(job_id: str, routine: str, state: str, error: str = "") -> JobRecord:
    return JobRecord(
        id=job_id,
        routine=routine,
        state=state,
        attempts=1,
        max_attempts=3,
        created_at=NOW,
        started_at=None,
        finished_at=None,
        deadline=NOW + 60,
        next_at=NOW,
        owner="",
        error=error,
        payload=b"",
        outcome=None,
        cancel_requested=False,
        queue="",
        key="",
        workflow="",
        priority=0,
    )


RECORDS = [
    record("6f1c2a9e4b7d3c01-1a", "app.tasks.convert_document", "failed", ERROR),
    record("6f1c2a9e4b7d3c01-1b", "app.tasks.send_email", "succeeded"),
    record("report-2024-06", "app.reports.monthly", "cancelled", "Cancelled: by an operator\nsecond line"),
]


def printed(renderable: object, width: int) -> list[str]:
    out = io.StringIO()
    Console(width=width, file=out, force_terminal=False).print(renderable)
    return out.getvalue().splitlines()


def row_of(lines: list[str], needle: str) -> str:
    """The one line that holds ``needle`` (a row printed over several lines would show it cut, or twice)."""
    found = [line for line in lines if needle in line]
    assert len(found) == 1, (needle, lines)
    return found[0]


@pytest.mark.parametrize("width", [80, 120])
def test_list_should_print_one_line_per_job_with_id_routine_and_state_whole(width):
    """Test that each job is one line no wider than the terminal, its id, routine and state uncut."""
    lines = printed(render(RECORDS, width), width)
    assert max(len(line) for line in lines) <= width
    for r in RECORDS:
        line = row_of(lines, r.id)
        assert r.routine in line and f" {r.state} " in line
    assert len(lines) == 1 + 3 + len(RECORDS) + 1  # title, the header between rules, the rows, the bottom rule


def test_list_at_80_columns_should_cut_the_error_and_drop_the_least_useful_columns():
    """Test that 80 columns keep id, routine, state and the error (cut, with an ellipsis), nothing else."""
    lines = printed(render(RECORDS, 80), 80)
    header = row_of(lines, "routine")
    assert [h for h in ("id", "routine", "state", "error") if h in header] == ["id", "routine", "state", "error"]
    assert not any(h in header for h in ("attempts", "priority", "created", "run at"))
    failed = row_of(lines, RECORDS[0].id)
    assert "ValueError:" in failed and failed.rstrip(" │┃").endswith("…")
    assert "second line" not in "\n".join(lines)  # an error's first line only


def test_list_at_120_columns_should_keep_attempts_and_the_run_at_time():
    """Test that a wider terminal gets the columns back in order: run at and attempts before priority."""
    header = row_of(printed(render(RECORDS, 120), 120), "routine")
    assert "attempts" in header and "run at (UTC)" in header and "priority" not in header


@pytest.mark.parametrize("width", [80, 120])
def test_show_should_print_one_line_per_field_and_the_full_error_after_the_table(width):
    """Test that ``show`` is one line per field, and an error cut in the table follows it in full."""
    lines = printed(render(RECORDS[0], width), width)
    assert max(len(line) for line in lines) <= width
    for field in ("id", "routine", "state", "created_at", "result_bytes"):
        assert len([line for line in lines if f" {field} " in line]) == 1, field
    after = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("└"))) + 1 :])
    assert ERROR in row_of(lines, " error ") or after == f"error: {ERROR}"


def test_show_should_print_no_error_line_for_a_job_without_one():
    """Test that the error line after the table appears only when the table had to cut the error."""
    assert not any(line.startswith("error:") for line in printed(render(RECORDS[1], 80), 80))


@pytest.fixture
def store_url(tmp_path) -> str:
    """A real SQLite store holding RECORDS' jobs, finished as they say."""

    async def fill() -> None:
        store = SQLiteStore(str(tmp_path / "jobs.db"))
        await store.open()
        try:
            now = time.time()
            for r in RECORDS:
                await store.submit(
                    NewJob(id=r.id, routine=r.routine, payload=b"p", created_at=now, deadline=now + 60), owner="me"
                )
                await store.finish(r.id, "me", r.state, now, outcome=None, error=r.error, started=now)
        finally:
            await store.close()

    asyncio.run(fill())
    return f"sqlite:///{tmp_path / 'jobs.db'}"


def jobs(*args: str, columns: str) -> str:
    env = {**os.environ, "COLUMNS": columns}
    done = subprocess.run(
        [sys.executable, "-m", "pool._cli._main", "jobs", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=True,
    )
    return done.stdout


@pytest.mark.parametrize("columns", ["80", "120"])
def test_the_real_command_piped_should_print_one_line_per_job(store_url, columns):
    """Test ``leakypool jobs URL list`` through a pipe at COLUMNS=80 and 120: one line per job, cells whole."""
    lines = jobs(store_url, "list", columns=columns).splitlines()
    assert max(len(line) for line in lines) <= int(columns)
    for r in RECORDS:
        line = row_of(lines, r.id)
        assert r.routine in line and f" {r.state} " in line


def test_json_should_still_print_every_field_in_full(store_url):
    """Test that ``--json`` is unchanged by the terminal's width: the data, the error whole."""
    data = json.loads(jobs(store_url, "list", "--json", columns="80"))
    assert {d["id"]: d["error"] for d in data} == {r.id: r.error for r in RECORDS}
    assert set(data[0]) == {
        "id",
        "routine",
        "state",
        "attempts",
        "max_attempts",
        "priority",
        "error",
        "created_at",
        "run_at",
        "started_at",
        "finished_at",
        "deadline",
        "owner",
        "queue",
        "key",
        "workflow",
        "cancel_requested",
        "result_bytes",
    }
