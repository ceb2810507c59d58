"""Tests for ``leakypool jobs STORE_URL pause|resume NAME | paused`` (`pool._cli._pause`): exit status and one line.

`main` runs in this process on a real SQLite file (an unreachable PostgreSQL is a closed port on 127.0.0.1);
the command as an operator runs it is in tests/integration/jobs/test_store_outages.py.
"""

from __future__ import annotations

import asyncio
import pathlib
import socket

import pytest

from pool._cli._pause import USAGE, main
from pool._jobs._stores._sqlite import SQLiteStore


@pytest.fixture
def store(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A job store file that exists (the command never creates one); its URL. One try per open."""
    monkeypatch.setenv("LEAKYPOOL_STORE_RETRY", "0")
    path = tmp_path / "jobs.db"

    async def create() -> None:
        created = SQLiteStore(str(path))
        await created.open()
        await created.close()

    asyncio.run(create())
    return f"sqlite:///{path}"


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TestMain:
    def test_pause_and_resume_should_change_what_paused_lists(self, store, capsys):
        """Test the three verbs on one store: exit 0, a line saying what was done, the paused queues listed."""
        assert main([store, "pause", "emails"]) == 0
        assert main([store, "pause", "reports"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out == [
            f"paused queue 'emails' in {store}: no process starts its pending jobs until it is resumed",
            f"paused queue 'reports' in {store}: no process starts its pending jobs until it is resumed",
        ]
        assert main([store, "paused"]) == 0
        assert capsys.readouterr().out.splitlines() == ["emails", "reports"]
        assert main([store, "resume", "emails"]) == 0
        assert capsys.readouterr().out == f"resumed queue 'emails' in {store}\n"
        assert main([store, "paused"]) == 0
        assert capsys.readouterr().out == "reports\n"

    def test_paused_should_print_nothing_when_no_queue_is_paused(self, store, capsys):
        """Test that an empty answer is no output at all (not a blank line)."""
        assert main([store, "paused"]) == 0
        assert capsys.readouterr() == ("", "")

    @pytest.mark.parametrize(
        "argv",
        [[], ["sqlite:///x.db"], ["sqlite:///x.db", "stop", "q"], ["sqlite:///x.db", "pause"], ["u", "paused", "q"]],
        ids=["nothing", "no-verb", "unknown-verb", "pause-without-name", "paused-with-name"],
    )
    def test_main_should_exit_2_with_the_usage_when_the_arguments_are_wrong(self, argv, capsys):
        """Test that a wrong command line exits 2 before touching any store, the usage on stderr."""
        assert main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.splitlines() == [
            "leakypool jobs: expected STORE_URL and one of pause, resume, paused",
            USAGE,
        ]

    def test_pause_should_exit_2_when_the_queue_name_is_blank(self, store, capsys):
        """Test that a blank queue name is refused as bad input, and nothing is paused."""
        assert main([store, "pause", "  "]) == 2
        assert "expected a queue name" in capsys.readouterr().err
        assert main([store, "paused"]) == 0
        assert capsys.readouterr().out == ""

    def test_main_should_exit_2_and_create_nothing_when_the_sqlite_file_does_not_exist(self, tmp_path, capsys):
        """Test that a typo in a SQLite path is named, and no empty store appears there."""
        missing = tmp_path / "jobz.db"
        assert main([f"sqlite:///{missing}", "pause", "emails"]) == 2
        err = capsys.readouterr().err
        assert (
            err
            == f"leakypool jobs: store sqlite:///{missing}: no such file (a typo? the jobs command never creates a store)\n"
        )
        assert list(tmp_path.iterdir()) == []

    def test_main_should_exit_2_when_the_url_is_not_a_store(self, capsys):
        """Test that a URL of another kind is refused with what is expected."""
        assert main(["redis://127.0.0.1/0", "paused"]) == 2
        assert "expected sqlite:///PATH or postgresql://" in capsys.readouterr().err

    def test_main_should_read_the_url_from_a_file_when_given_at_path(self, store, tmp_path, capsys):
        """Test that ``@FILE`` names the store by reference (a URL with a password is no argument)."""
        reference = tmp_path / "store-url"
        reference.write_text(store + "\n")
        assert main([f"@{reference}", "pause", "emails"]) == 0
        assert main([store, "paused"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "emails"

    def test_main_should_exit_2_when_the_url_reference_is_empty(self, tmp_path, capsys):
        """Test that an empty ``@FILE`` is refused (it must not mean "no store")."""
        reference = tmp_path / "store-url"
        reference.write_text("\n")
        assert main([f"@{reference}", "paused"]) == 2
        assert capsys.readouterr().err == f"leakypool jobs: store @{reference}: {reference} is empty\n"

    def test_main_should_exit_1_without_the_password_when_the_store_cannot_be_reached(self, monkeypatch, capsys):
        """Test that a store out of reach exits 1 with one line, the URL's password left out."""
        monkeypatch.setenv("LEAKYPOOL_STORE_RETRY", "0")
        url = f"postgresql://app:s3cret-pw@127.0.0.1:{closed_port()}/app"
        assert main([url, "pause", "emails"]) == 1
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("leakypool jobs: ")
        assert "s3cret-pw" not in err and "127.0.0.1" in err
