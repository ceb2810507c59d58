"""Tests for pool._base._lost: which store errors mean "out of reach, try again" and which "refused"."""

from __future__ import annotations

import socket
import sqlite3

import asyncpg.exceptions
import asyncpg.exceptions._base
import pytest

import pool
from pool._base._lost import lost_connection


def caused_by(cause: BaseException, depth: int = 1) -> BaseException:
    """A StoreError ``depth`` links above ``cause`` in its chain of causes."""
    exc = cause
    for i in range(depth):
        outer = pool.StoreError(f"level {i}")
        outer.__cause__ = exc
        exc = outer
    return exc


class TestLostConnection:
    @pytest.mark.parametrize(
        "exc",
        [
            ConnectionRefusedError(111, "refused"),
            ConnectionResetError(104, "reset"),
            socket.gaierror(-2, "Name or service not known"),
            TimeoutError(),
            OSError(28, "No space left on device"),
        ],
    )
    def test_lost_connection_should_be_true_for_network_and_os_errors(self, exc):
        """Test that the operating system's errors (and timeouts) count as out of reach."""
        assert lost_connection(exc)

    @pytest.mark.parametrize(
        "exc",
        [
            asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
            asyncpg.exceptions.ConnectionFailureError("failure"),
            asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),  # a subclass (57P03)
            asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command"),
            asyncpg.exceptions.TooManyConnectionsError("too many clients already"),
            asyncpg.exceptions._base.InternalClientError("cannot switch to state 12"),
            asyncpg.exceptions._base.InterfaceError("connection is closed"),
        ],
    )
    def test_lost_connection_should_be_true_for_asyncpgs_connection_level_errors(self, exc):
        """Test asyncpg's classes (or their bases) that say the connection, not the statement, failed."""
        assert lost_connection(exc)

    @pytest.mark.parametrize(
        "exc",
        [
            asyncpg.exceptions.UniqueViolationError("duplicate key"),
            asyncpg.exceptions._base.InterfaceError("the argument is not a str"),  # a misuse: no retry helps
            asyncpg.exceptions._base.DataError("invalid input: connection closed"),  # bad input, whatever it says
        ],
    )
    def test_lost_connection_should_be_false_for_asyncpg_errors_about_the_statement(self, exc):
        """Test that a refused statement or a misuse is not retried."""
        assert not lost_connection(exc)

    def test_lost_connection_should_look_only_at_asyncpgs_own_classes(self):
        """Test that a class of another library named like asyncpg's is not taken for it."""
        lookalike = type("ConnectionDoesNotExistError", (Exception,), {"__module__": "mydriver"})
        assert not lost_connection(lookalike("connection is closed"))

    @pytest.mark.parametrize(
        ("message", "lost"),
        [
            ("database is locked", True),
            ("database is busy", True),
            ("no such table: jobs", False),
            ("disk I/O error", False),
        ],
    )
    def test_lost_connection_should_be_true_for_sqlite_only_when_the_file_is_locked_or_busy(self, message, lost):
        """Test SQLite's errors: a lock held by another process is worth waiting out, anything else not."""
        assert lost_connection(sqlite3.OperationalError(message)) is lost

    @pytest.mark.parametrize("exc", [ValueError("bad"), pool.StoreError("refused"), KeyError("k")])
    def test_lost_connection_should_be_false_for_other_errors(self, exc):
        """Test that an error with no cause from the list is a refusal."""
        assert not lost_connection(exc)

    def test_lost_connection_should_follow_the_chain_of_causes(self):
        """Test that a StoreError raised from a lost connection counts as lost."""
        assert lost_connection(caused_by(ConnectionResetError(104, "reset"), depth=3))
        assert not lost_connection(caused_by(ValueError("bad"), depth=3))

    def test_lost_connection_should_stop_after_eight_links(self):
        """Test the bound on the chain: a cause nine links down is not looked at (nor is a cycle followed forever)."""
        assert lost_connection(caused_by(OSError("gone"), depth=7))
        assert not lost_connection(caused_by(OSError("gone"), depth=8))
        cycle = pool.StoreError("a")
        cycle.__cause__ = pool.StoreError("b")
        cycle.__cause__.__cause__ = cycle
        assert not lost_connection(cycle)
