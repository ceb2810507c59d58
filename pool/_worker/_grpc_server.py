"""The worker service over gRPC (TCP, optionally mutual TLS): what a worker on the LAN or a ``--port`` serves.

The only worker module that imports grpc, so a worker on a unix socket
(`_unix_server`) never loads it. Every call (Dispatch, State, Stop) is a
stream of bytes that opens with the handshake (`pool._transport._handshake`).
The TCP port is the `Door`'s: it judges each connection (a caller on loopback
must run as a trusted uid), caps them per peer and in all, closes one that
does not prove itself within seconds, and relays the rest to this server on
a unix socket of its own. Nothing a caller sends is read before it proved
itself, except its challenge, and no gRPC message larger than
`GRPC_MESSAGE_MAX_BYTES` is read at all (`_pieces`). A caller off loopback
without TLS asks in its proof for sealed messages (`pool._transport._stream_seal`):
each one it sends is checked before it is read, and each answer sealed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from .._config import WorkerConfig
from .._errors import ConfigError
from .._transport import (
    MESSAGE_MAX_BYTES,
    SERVER_OPTIONS,
    SERVICE,
    TIMEOUT_S,
    Assembler,
    ProtocolError,
    Refused,
    Responder,
    StreamSeal,
    Trust,
    bind_address,
    pieces,
)
from .._transport import leakypool_pb2 as pb
from ._door import Door
from ._keys import worker_trust
from ._peers import undecodable
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REQUEST_MAX_BYTES = 1 << 10
"""The largest State or Stop request read (the one is empty, the other a float)."""


def handler(service: WorkerService, trust: Trust, door: Door) -> grpc.GenericRpcHandler:
    """The generic handler serving `SERVICE` with ``service``: every call proves itself with ``trust``'s keys;
    the first that does on a connection tells ``door`` (which then keeps no deadline for it)."""
    uid = uuid.UUID(service.uid)

    async def admit(method: str, context: grpc.aio.ServicerContext) -> StreamSeal | None:
        """The handshake; returns once the caller proved itself (with the seal of the call's messages, if it asked
        for one), else ends the call (UNAUTHENTICATED)."""
        try:
            responder = Responder(trust.keyring, method, uid)
            async with asyncio.timeout(TIMEOUT_S):
                challenge = await context.read()
                if not isinstance(challenge, bytes):
                    raise Refused("it hung up before its challenge")
                try:
                    await context.write(responder.answer(challenge))
                except Refused as exc:
                    if exc.reply:
                        await context.write(exc.reply)
                    raise
                proof = await context.read()
                if not isinstance(proof, bytes):
                    raise Refused("it hung up before its proof")
                responder.check(proof)
            door.proven(context.peer())
            return responder.seal
        except (Refused, TimeoutError) as exc:
            _log.warning("refused a caller at %s: %s", door.describe(context.peer()), exc)
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"this worker runs calls only for callers that prove "
                f"they hold its secret (docs/lan-security.md): {exc}",
            )
            raise AssertionError("abort raised") from None  # (abort raised)

    async def request(context: grpc.aio.ServicerContext, seal: StreamSeal | None) -> bytes | memoryview:
        piece = await context.read()
        try:
            whole = Assembler(REQUEST_MAX_BYTES).add(piece) if isinstance(piece, bytes) else None
            if whole is not None and seal is not None:
                whole = seal.open(whole)
        except ProtocolError as exc:
            whole, why = None, str(exc)
        else:
            why = "expected one request"
        if whole is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
            raise AssertionError(why)  # (abort raised)
        return whole

    async def dispatch(requests: Any, context: grpc.aio.ServicerContext) -> None:
        seal = await admit("Dispatch", context)
        assembler = Assembler(MESSAGE_MAX_BYTES)

        async def read() -> object:
            while True:
                piece = await context.read()
                if not isinstance(piece, bytes):
                    return piece
                whole = assembler.add(piece)
                if whole is not None:
                    return pb.Frames.FromString(whole if seal is None else seal.open(whole))

        async def write(frames: pb.Frames) -> None:
            data = frames.SerializeToString()
            for piece in pieces(data if seal is None else seal.seal(data)):
                await context.write(piece)

        reason = await service.serve_stream(
            read, write, f"dispatcher {door.describe(context.peer())}", benign=(grpc.RpcError,)
        )
        if undecodable(reason, (grpc.RpcError,)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable frames: {reason}")

    async def stop(requests: Any, context: grpc.aio.ServicerContext) -> None:
        seal = await admit("Stop", context)
        reply = service.stop(pb.StopRequest.FromString(await request(context, seal))).SerializeToString()
        await context.write(next(pieces(reply if seal is None else seal.seal(reply))))

    async def state(requests: Any, context: grpc.aio.ServicerContext) -> None:
        seal = await admit("State", context)
        await request(context, seal)
        reply = service.state().SerializeToString()
        await context.write(next(pieces(reply if seal is None else seal.seal(reply))))

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Dispatch": grpc.stream_stream_rpc_method_handler(dispatch),
            "Stop": grpc.stream_stream_rpc_method_handler(stop),
            "State": grpc.stream_stream_rpc_method_handler(state),
        },
    )


async def start(config: WorkerConfig, service: WorkerService) -> tuple[Callable[[float | None], Awaitable[None]], int]:
    """Serve ``service`` on ``--host``/``--port``; returns how to stop the server (grace in s) and its port.

    Raises:
        ConfigError: the address cannot be bound, or the TLS files read.
    """
    trust = worker_trust(config)
    door = Door(trust.uids)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler(service, trust, door),))
    try:
        credentials = _credentials(config)
    except OSError as exc:
        await door.close()
        raise ConfigError(f"--tls-cert/--tls-key/--tls-client-ca: cannot read: {exc}") from None
    inner = "unix:" + door.inner_path
    try:
        if credentials is None:
            server.add_insecure_port(inner)
        else:
            server.add_secure_port(inner, credentials)
    except RuntimeError as exc:
        await door.close()
        raise ConfigError(f"cannot serve gRPC at {inner}: {exc}") from None
    await server.start()
    address = bind_address(config.host, config.port)
    try:
        port = await door.start(config.host, config.port)
    except OSError as exc:
        await server.stop(None)
        await door.close()
        raise ConfigError(f"--host/--port: cannot bind {address}: {exc.strerror or exc}") from None
    _log.debug("callers must prove they hold %s", trust.keyring.describe())

    async def stop(grace: float | None) -> None:
        try:
            await server.stop(grace)
        finally:
            await door.close()

    return stop, port


def _credentials(config: WorkerConfig) -> grpc.ServerCredentials | None:
    if not config.tls:
        return None
    with open(config.tls_key, "rb") as f:
        key = f.read()
    with open(config.tls_cert, "rb") as f:
        cert = f.read()
    client_ca = None
    if config.tls_client_ca:
        with open(config.tls_client_ca, "rb") as f:
            client_ca = f.read()
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )
