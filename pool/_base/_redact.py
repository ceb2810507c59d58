"""Secrets out of text that reaches a log or an error: URL passwords and ``password=`` parameters.

Database and registry URLs carry passwords (``postgresql://app:secret@db/app``
or ``...?password=secret``), and so does anything that quotes them: an error
message, a command line, a command's stderr (``sh -x`` and ``docker`` echo
their arguments). Everything we log or raise passes through `redacted`.
"""

from __future__ import annotations

import re
from typing import Final

MASK: Final[str] = "***"
"""What a password becomes."""

_USERINFO: Final[re.Pattern[str]] = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@?#]*:)[^\s/?#]*(?=@)")
"""``scheme://user:`` then the password, up to the last ``@`` before the host (a raw ``@`` in it too)."""

_PARAM: Final[re.Pattern[str]] = re.compile(r"(?P<head>[?&;]password=)[^\s&;#'\"]*", flags=re.IGNORECASE)
"""A ``password=`` query parameter (libpq's URLs accept one)."""


def redacted(text: str) -> str:
    """``text`` with every ``scheme://user:PASSWORD@`` and ``password=VALUE`` parameter masked."""
    return _PARAM.sub(rf"\g<head>{MASK}", _USERINFO.sub(rf"\g<head>{MASK}", text))
