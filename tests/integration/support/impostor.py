"""A fake worker for tests: a real gRPC server at a planted record's address that logs all it receives.

    python -m tests.integration.support.impostor LOG MARKER

It prints its port, then serves every method of the worker service (v2,
and v1's for good measure): each message and each call's metadata are
appended to LOG (one JSON line each), and each call is answered with a
pickle that, if anyone unpickled it, would create MARKER (as the one of
issue 43 ran ``id`` inside the pool and returned 42). A genuine pool sends
it nothing but a challenge, and unpickles nothing it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import pickle
import sys
from typing import Any

import grpc


class Payload:
    """Unpickled, it creates a file: proof that the receiver ran what a stranger sent."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


async def main(log: str, marker: str) -> None:
    bomb = pickle.dumps(Payload(marker))

    def record(kind: str, data: Any) -> None:
        with open(log, "a") as f:
            f.write(json.dumps({"kind": kind, "data": data}) + "\n")

    async def serve(method: bytes | str, requests: Any, context: grpc.aio.ServicerContext) -> None:
        metadata = [list(m) for m in context.invocation_metadata() or ()]
        record("call", {"method": str(method), "metadata": metadata})
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                while isinstance(message := await context.read(), bytes):
                    record("message", message.hex())
                    for reply in (b"LPA1" + bomb, b"\0" + bomb, bomb):
                        await context.write(reply)

    class Everything(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            return grpc.stream_stream_rpc_method_handler(functools.partial(serve, details.method))

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1)])
    server.add_generic_rpc_handlers((Everything(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
