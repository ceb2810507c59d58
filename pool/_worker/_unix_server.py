"""The worker service on a unix socket, without HTTP/2: what a pool's own workers serve (see `pool._transport._framing`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Final

from .._base._tasks import TaskOwner
from .._transport._framing import HELLO_MAX_BYTES, MessageStream, ProtocolError, method_of
from .._transport._proto import leakypool_pb2 as pb
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REQUEST_TIMEOUT_S: Final[float] = 10.0
"""How long a new connection may take to say what it wants (its hello, then a State/Stop request) before it is closed."""


class UnixServer:
    """Serves `WorkerService` on a unix socket: one task per connection, ended on `aclose`.

    Args:
        service: What the connections call.
        path: The socket to create (its directory's mode decides who may connect).
    """

    def __init__(self, service: WorkerService, path: str) -> None:
        self._service = service
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._connections = TaskOwner(f"unix socket {path}", _log)
        self._streams: set[MessageStream] = set()

    async def start(self) -> None:
        """Listen on the socket.

        Raises:
            OSError: it cannot be created.
        """
        self._server = await asyncio.get_running_loop().create_unix_server(self._accept, self.path)

    def _accept(self) -> MessageStream:
        stream = MessageStream(first_limit=HELLO_MAX_BYTES)
        self._streams.add(stream)
        self._connections.spawn(self._serve(stream), name="unix connection")
        return stream

    async def _serve(self, stream: MessageStream) -> None:
        try:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    method = method_of(await stream.receive())
            except (ConnectionError, ProtocolError, TimeoutError):
                method = None
            if method is None:
                return  # not one of ours (or gone): close it
            if method == "Dispatch":
                await self._service.serve_stream(
                    stream.read_frames,
                    stream.write_frames,
                    "a dispatcher on the unix socket",
                    attach=stream.attach,
                    write_now=stream.write_frames_now,
                )
                return
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                request = await stream.receive()
            if request is None:
                return
            if method == "State":
                reply = self._service.state()
            else:
                reply = self._service.stop(pb.StopRequest.FromString(request))
            await stream.send(reply.SerializeToString())
        except Exception as exc:  # a broken or silent peer (TimeoutError included): its connection ends, the worker goes on
            _log.warning("closing a unix-socket connection: %s", exc)
        finally:
            self._streams.discard(stream)
            stream.close()

    async def aclose(self) -> None:
        """Stop listening, end every connection, and remove the socket."""
        if self._server is not None:
            self._server.close()
        await self._connections.aclose()
        for stream in list(self._streams):
            stream.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __repr__(self) -> str:
        return f"<UnixServer {self.path} connections={len(self._streams)}>"
