"""Secrets out of text that reaches a log or an error: URL passwords and ``password=`` parameters.

Database and registry URLs carry passwords (``postgresql://app:secret@db/app``
or ``...?password=secret``), and so does anything that quotes them: an error
message, a command line, a command's stderr (``sh -x`` and ``docker`` echo
their arguments). Everything we show passes through `redacted`: errors we
raise, job errors on the observation port and in ``leakypool jobs``, and
every line leakypool's own loggers emit (`RedactingFilter`, on each of
them: a routine's exception text, a provisioner's stderr may quote a URL).
"""

from __future__ import annotations

import logging
import re
from typing import Final

MASK: Final[str] = "***"
"""What a password becomes."""

_USERINFO: Final[re.Pattern[str]] = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@?#]*:)[^\s/?#]*(?=@)")
"""``scheme://user:`` then the password, up to the last ``@`` before the host (a raw ``@`` in it too)."""

_PARAM: Final[re.Pattern[str]] = re.compile(r"(?P<head>[\w.-]*password\s*=\s*)[^\s&;,#'\")]+", flags=re.IGNORECASE)
"""A ``password=`` pair: a URL's query parameter (libpq's URLs accept one), a libpq keyword string
(``host=db password=x``), a variable (``PGPASSWORD=x``)."""


def redacted(text: str) -> str:
    """``text`` with every ``scheme://user:PASSWORD@`` and ``password=VALUE`` parameter masked."""
    return _PARAM.sub(rf"\g<head>{MASK}", _USERINFO.sub(rf"\g<head>{MASK}", text))


LOGGERS: Final[tuple[str, ...]] = (
    "leakypool.pool",
    "leakypool.worker",
    "leakypool.discovery",
    "leakypool.jobs",
    "leakypool.metrics",
)
"""Every logger leakypool writes to."""


class RedactingFilter(logging.Filter):
    """Masks passwords in a record's message and traceback before any handler sees it.

    Runs only for records that are emitted (a disabled level makes none), so
    it costs nothing on a hot path that logs at DEBUG.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redacted(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redacted(logging.Formatter().formatException(record.exc_info))
        return True


_FILTER: Final[RedactingFilter] = RedactingFilter()

for _name in LOGGERS:  # at import: every module that logs imports this one (settings echo what they refuse)
    if _FILTER not in logging.getLogger(_name).filters:
        logging.getLogger(_name).addFilter(_FILTER)
