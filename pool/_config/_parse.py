"""A setting's declaration (`Setting`) and the parsers of its values.

Each parser takes the raw text and returns the value or raises ValueError;
`Setting.convert` turns the ValueError into a `ConfigError` that names the
flag or variable, what was expected and what was given. The tables of
settings themselves live in `pool._config._settings`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from .._base import redacted
from .._errors import ConfigError

PREFIX: Final[str] = "LEAKYPOOL_"
"""Every variable leakypool reads starts with this."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its attribute, flag, variable, parser and help text."""

    name: str
    parse: Callable[[str], Any]
    expect: str
    default: Any
    help: str
    repeat: bool = False

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. ``--max-concurrent-tasks``."""
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """The environment variable, e.g. ``LEAKYPOOL_MAX_CONCURRENT_TASKS``."""
        return PREFIX + self.name.upper()

    def convert(self, raw: str, source: str) -> Any:
        """Parse ``raw``; on failure raise `ConfigError` naming ``source``."""
        try:
            return self.parse(raw.strip())
        except (ValueError, TypeError):
            raise ConfigError(f"{source}: expected {self.expect}, got {redacted(raw)!r}") from None


def resolve(
    settings: Sequence[Setting],
    explicit: Mapping[str, Any],
    environ: Mapping[str, str] | None,
) -> dict[str, Any]:
    """Values for ``settings``: explicit beats environment beats default.

    Args:
        settings: The table to resolve.
        explicit: Values given in code or on the command line (None = unset).
        environ: The environment to read, or None to ignore it.
    """
    values: dict[str, Any] = {}
    for setting in settings:
        value = explicit.get(setting.name)
        if value is None and environ is not None and setting.env in environ:
            value = setting.convert(environ[setting.env], setting.env)
        values[setting.name] = setting.default if value is None else value
    return values


def to_env(settings: Sequence[Setting], values: Mapping[str, Any]) -> dict[str, str]:
    """The ``LEAKYPOOL_*`` variables that reproduce ``values``."""
    env = {}
    for setting in settings:
        value = values[setting.name]
        if isinstance(value, bool):
            env[setting.env] = "1" if value else "0"
        elif isinstance(value, tuple):
            env[setting.env] = ",".join(map(str, value))
        else:
            env[setting.env] = str(value)
    return env


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """A parser for an int within ``[low, high]``."""

    def parse(raw: str) -> int:
        value = int(raw)
        if value < low or (high is not None and value > high):
            raise ValueError(raw)
        return value

    return parse


_SIZE_UNITS: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
"""Byte units a size may carry (case-insensitive): SI (``MB``) or binary (``MiB``; ``M`` alone is binary)."""


def size_bytes(raw: str) -> int:
    """Parse a size > 0 in bytes: ``1048576``, ``"512MiB"``, ``"2GiB"``, ``"500MB"``, ``"1.5G"``."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([A-Za-z]*)\s*", raw)
    if match is None or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(raw)
    value = int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    if value <= 0:
        raise ValueError(raw)
    return value


def size_or_zero(raw: str) -> int:
    """A size as `size_bytes`, or 0 for "no limit"."""
    return 0 if raw in ("", "0") else size_bytes(raw)


def import_path(raw: str) -> str:
    """A ``module:function`` path (dotted module, dotted attribute), or empty for "not set"."""
    name = r"[A-Za-z_][A-Za-z0-9_]*"
    if raw and re.fullmatch(rf"{name}(\.{name})*:{name}(\.{name})*", raw) is None:
        raise ValueError(raw)
    return raw


def seconds(raw: str) -> float:
    """Parse a duration in float seconds, >= 0 (0 usually means "never")."""
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError(raw)
    return value


def positive_seconds(raw: str) -> float:
    """Parse a duration in float seconds, > 0."""
    value = seconds(raw)
    if value == 0:
        raise ValueError(raw)
    return value


def boolean(raw: str) -> bool:
    """Parse 1/0, true/false, yes/no, on/off."""
    lowered = raw.lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(raw)


def choice(*options: str) -> Callable[[str], str]:
    """A parser accepting one of ``options``."""

    def parse(raw: str) -> str:
        if raw not in options:
            raise ValueError(raw)
        return raw

    return parse


def text(raw: str) -> str:
    """Any string, as given."""
    return raw


def build_id(raw: str) -> str:
    """A build id (a git commit, an image tag): up to 128 printable ASCII characters without spaces, or empty."""
    if len(raw) > 128 or not all("!" <= c <= "~" for c in raw):
        raise ValueError(raw)
    return raw


def hex_text(raw: str) -> str:
    """Bytes written in hexadecimal (empty: none)."""
    bytes.fromhex(raw)  # (raises ValueError, named by the caller)
    return raw


def secret_text(raw: str) -> str:
    """A secret given on a command line by reference (``@FILE``, ``env:NAME``; see `indirect`), or as itself."""
    return indirect(raw)


def store_url(raw: str) -> str:
    """A job store URL (``sqlite:///PATH``, ``postgresql://...``), or empty for "no store"; see `indirect`."""
    url = indirect(raw)
    if url and not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise ValueError(raw)
    return url


def indirect(raw: str, environ: Mapping[str, str] = os.environ) -> str:
    """A value given where every user of the host can read it (a command line) by reference (issue 43).

    ``@PATH``: the first line of that file (a mounted secret, 0600); ``env:NAME``: that variable;
    anything else: itself. ``/proc/PID/cmdline`` is world-readable, a process's environment and a
    private file are not: a URL with a password belongs in one of them.

    Raises:
        ValueError: the file cannot be read or its first line is empty, or the variable is not set.
            (Never "" for a reference: "" means "none" to some settings, a job store's URL among
            them, and a secret not yet filled in must not start a pool without its store.)
    """
    if raw.startswith("@"):
        try:
            with open(raw[1:]) as f:
                value = f.readline().strip()
        except OSError as exc:
            raise ValueError(f"{raw[1:]}: {exc.strerror}") from None
        if not value:
            raise ValueError(f"{raw[1:]} is empty")
        return value
    if raw.startswith("env:"):
        name = raw[len("env:") :]
        if not environ.get(name):
            raise ValueError(f"{name} is not set")
        return environ[name].strip()
    return raw


def path_or_empty(raw: str) -> str:
    """A readable file's path, or empty for "not set"."""
    if raw and not (os.path.isfile(raw) and os.access(raw, os.R_OK)):
        raise ValueError(raw)
    return raw


def ipv4_list(raw: str) -> tuple[str, ...]:
    """Comma-separated IPv4 addresses (of interfaces)."""
    addresses = tuple(a.strip() for a in raw.split(",") if a.strip())
    for address in addresses:
        ipaddress.IPv4Address(address)
    return addresses


def uid_list(raw: str) -> tuple[int, ...]:
    """Comma-separated user ids (numbers >= 0)."""
    uids = tuple(int(u) for u in raw.split(",") if u.strip())
    if any(u < 0 for u in uids):
        raise ValueError(raw)
    return uids


def tag_list(raw: str) -> tuple[str, ...]:
    """Comma-separated tags; each non-empty, without spaces."""
    tags = tuple(t.strip() for t in raw.split(",") if t.strip())
    if any(" " in t for t in tags):
        raise ValueError(raw)
    return tags


def dns_sd_type(raw: str) -> str:
    """A DNS-SD service type such as ``_leakypool._tcp.local.`` (RFC 6763 §7: name up to 15 chars)."""
    parts = raw.split(".")
    if (
        len(parts) != 4
        or parts[1:] != ["_tcp", "local", ""]
        or not parts[0].startswith("_")
        or not 2 <= len(parts[0]) <= 16
    ):
        raise ValueError(raw)
    return raw


def uid_or_empty(raw: str) -> str:
    """A UUID in canonical form, or empty for "generate one"."""
    return str(uuid.UUID(raw)) if raw else ""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (an observation port there needs no token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
