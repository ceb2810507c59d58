"""What every layer of both processes stands on: owned background tasks, child processes, worker uids.

_tasks    TaskOwner: every background task has an owner that ends it
_process  child processes on the event loop: exit watching, safe forking
_ids      time-ordered worker uids
_random   the one random generator (jitter)
_exit     exit statuses a worker uses on purpose (EXIT_RETIRED: recycled, not crashed)
_redact   passwords out of URLs, commands and messages before they are logged
_public   public names under their public path (what is pickled names pool.X)
_lost     whether a store error means "out of reach" (retry) or refused (do not): both sides use it
_role     which side of the pool this process is on
_private  directories that carry trust: 0700, this user's, checked on every open
_lazy     names a package exports but loads on first use (its ``__getattr__``)
"""

from __future__ import annotations

from ._exit import DRAINING_MESSAGE as DRAINING_MESSAGE
from ._exit import EXIT_INIT_FAILED as EXIT_INIT_FAILED
from ._exit import EXIT_RETIRED as EXIT_RETIRED
from ._ids import new_uid as new_uid
from ._lazy import lazy_attribute as lazy_attribute
from ._lost import lost_connection as lost_connection
from ._private import SQLITE_COMPANIONS as SQLITE_COMPANIONS
from ._private import check_private as check_private
from ._private import private_directory as private_directory
from ._private import private_file as private_file
from ._private import read_only_filesystem as read_only_filesystem
from ._private import trusted_file as trusted_file
from ._process import ForkedChild as ForkedChild
from ._process import descriptors as descriptors
from ._process import native_threads as native_threads
from ._process import resident_bytes as resident_bytes
from ._process import watch_exit as watch_exit
from ._public import public as public
from ._random import RANDOM as RANDOM
from ._redact import redacted as redacted
from ._role import become_worker as become_worker
from ._role import in_worker as in_worker
from ._tasks import TaskOwner as TaskOwner

__all__ = [
    "DRAINING_MESSAGE",
    "EXIT_INIT_FAILED",
    "EXIT_RETIRED",
    "RANDOM",
    "SQLITE_COMPANIONS",
    "ForkedChild",
    "TaskOwner",
    "become_worker",
    "check_private",
    "descriptors",
    "in_worker",
    "lazy_attribute",
    "lost_connection",
    "native_threads",
    "new_uid",
    "private_directory",
    "private_file",
    "public",
    "read_only_filesystem",
    "redacted",
    "resident_bytes",
    "trusted_file",
    "watch_exit",
]
