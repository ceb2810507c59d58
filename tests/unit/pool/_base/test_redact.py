"""Tests for `redacted`: no password reaches a log line or an error."""

from __future__ import annotations

import logging

import hypothesis.strategies as st
import pytest
from hypothesis import given

from pool._base._redact import LOGGERS, redacted

SECRET = st.text(st.characters(blacklist_characters="/?#", blacklist_categories=("Cs", "Z", "Cc")), min_size=4)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://app:secret@db/app", "postgresql://app:***@db/app"),
        ("postgres://app@db/app", "postgres://app@db/app"),
        ("sqlite:///tmp/registry.db", "sqlite:///tmp/registry.db"),
        (
            "postgresql://db/app?user=app&password=s3cret&sslmode=require",
            "postgresql://db/app?user=app&password=***&sslmode=require",
        ),
        (
            "+ docker run img leakypool-worker --registry postgresql://u:p@ss@h:5432/db --idle-timeout 2",
            "+ docker run img leakypool-worker --registry postgresql://u:***@h:5432/db --idle-timeout 2",
        ),
        ("host=db password=s3cret user=app", "host=db password=*** user=app"),  # a libpq keyword string
        ("PGPASSWORD=s3cret psql -h db", "PGPASSWORD=*** psql -h db"),
        ("Password = s3cret, then", "Password = ***, then"),
        ("password authentication failed for user app", "password authentication failed for user app"),
    ],
)
def test_redacted_should_mask_passwords_and_keep_the_rest(text, expected):
    assert redacted(text) == expected


@given(secret=SECRET.filter(lambda s: "@" not in s[-1:]), before=st.text(max_size=20), after=st.text(max_size=20))
def test_redacted_should_never_leave_a_url_password_in_a_line(secret, before, after):
    line = f"{before} postgresql://app:{secret}@db.internal:5432/app {after}"
    assert f":{secret}@" not in redacted(line)


@pytest.mark.parametrize("name", LOGGERS)
def test_every_leakypool_logger_should_mask_passwords_in_messages_and_tracebacks(name, caplog):
    """Test that a line one of leakypool's loggers emits (its message, its arguments, its traceback) holds no
    password: a routine's exception or a provisioner's stderr may quote a URL (issue 43)."""
    caplog.set_level(logging.INFO, logger=name)
    try:
        raise ValueError("cannot connect to postgresql://app:hunter2@db/app")
    except ValueError:
        logging.getLogger(name).exception("job failed: %s", "host=db password=hunter2")
    (record,) = caplog.records
    assert "hunter2" not in caplog.text and "password=***" in record.getMessage() and "app:***@db" in caplog.text
