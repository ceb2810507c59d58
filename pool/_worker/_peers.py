"""The dispatchers a worker serves: one `Peer` per stream, and how a stream's end is read."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, Final

from .._errors import WorkerBroken
from .._transport import WriteNow
from ._hosted import Code, Hosted

STREAM_END_WAIT_S: Final[float] = 5.0
"""On exit, how long the last outcomes get to leave before the streams are cut."""


@dataclasses.dataclass(eq=False)
class Peer:
    """One dispatcher's stream, as this worker serves it."""

    received: dict[bytes, Code] = dataclasses.field(default_factory=dict)  # routines it sent, by digest
    hosted: dict[int, Hosted] = dataclasses.field(default_factory=dict)  # its calls running here, by id
    stream: asyncio.Task[Any] | None = None
    through: tuple[Callable[[], None], WriteNow] | None = None  # its transport's `pull` and `write_through`


def undecodable(reason: BaseException, benign: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether a stream ended on bytes that are not our protocol, rather than a peer that left or a shutdown.

    ``benign``: the transport's own "the stream ended" errors (gRPC's `RpcError`).
    """
    return not isinstance(reason, (ConnectionError, asyncio.CancelledError, *benign))


def lost_dispatcher(reason: BaseException) -> BaseException:
    return WorkerBroken(f"the dispatcher's stream ended: {reason}")
