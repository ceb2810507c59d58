"""Settings both processes read: flags and ``LEAKYPOOL_*`` variables, how their values parse, places on disk.

    _settings  PoolConfig and WorkerConfig: every setting, its flag, variable, default and check
    _parse     the values' parsers (durations, sizes, addresses), each failing with one line naming the setting
    _places    where things live by default: the per-user secret, the local registry

A foundation: imported from every layer, it imports nothing of pool but the error tree.
"""

from __future__ import annotations

from ._parse import PREFIX as PREFIX
from ._parse import indirect as indirect
from ._parse import is_loopback as is_loopback
from ._places import default_registry as default_registry
from ._places import default_secret_file as default_secret_file
from ._settings import PLAIN_PREFETCH as PLAIN_PREFETCH
from ._settings import POOL_SETTINGS as POOL_SETTINGS
from ._settings import PoolConfig as PoolConfig
from ._settings import WorkerConfig as WorkerConfig
from ._settings import secret_settings as secret_settings

__all__ = [
    "PLAIN_PREFETCH",
    "POOL_SETTINGS",
    "PREFIX",
    "PoolConfig",
    "WorkerConfig",
    "default_registry",
    "default_secret_file",
    "indirect",
    "is_loopback",
    "secret_settings",
]
