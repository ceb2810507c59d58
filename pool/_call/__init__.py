"""What a call is, on either side of the stream: the task that travels, where it goes, how it ends.

    _task        Task: a call as balancers and backpressure hooks see it; CallRecord: the call itself as it travels
    _dispatcher  the Dispatcher protocol, and the one current in this context (a pool, or a worker's upstream)
    _calls       the caller's side of a call: open it on a stream, read its replies, decode its outcome
    _connection  the dispatching side's connection to one worker: its channel, its stream, opening calls on it

Both processes import `_task`, `_dispatcher` and `_calls` (a worker calls routines upstream); `_connection`
is the dispatching side's only. It stands on `pool._transport` (bytes) and `pool._base`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._base import lazy_attribute
from ._calls import CANCEL_CONFIRM_S as CANCEL_CONFIRM_S
from ._calls import PLAIN_ABORT_S as PLAIN_ABORT_S
from ._calls import RemoteGenerator as RemoteGenerator
from ._calls import StartByPassed as StartByPassed
from ._calls import call_failure as call_failure
from ._calls import call_routine as call_routine
from ._calls import judge_first as judge_first
from ._calls import open_call as open_call
from ._calls import outcome_result as outcome_result
from ._dispatcher import Dispatches as Dispatches
from ._dispatcher import closed as closed
from ._dispatcher import current_dispatcher as current_dispatcher
from ._dispatcher import opened as opened
from ._dispatcher import reset_dispatcher as reset_dispatcher
from ._dispatcher import set_dispatcher as set_dispatcher
from ._task import CallRecord as CallRecord
from ._task import Task as Task

if TYPE_CHECKING:
    from ._connection import WorkerConnection as WorkerConnection
    from ._connection import open_channel as open_channel

LAZY = {"WorkerConnection": "._connection", "open_channel": "._connection"}
"""Names whose modules load on first use (`pool._base._lazy`): a connection to a worker is the dispatching side's only."""


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, LAZY, globals(), name)


__all__ = [
    "CANCEL_CONFIRM_S",
    "PLAIN_ABORT_S",
    "CallRecord",
    "Dispatches",
    "RemoteGenerator",
    "StartByPassed",
    "Task",
    "WorkerConnection",
    "call_failure",
    "call_routine",
    "closed",
    "current_dispatcher",
    "judge_first",
    "open_call",
    "open_channel",
    "opened",
    "outcome_result",
    "reset_dispatcher",
    "set_dispatcher",
]
