"""The worker service over gRPC (TCP, optionally mutual TLS): what a worker on the LAN or a ``--port`` serves.

The only worker module that imports grpc, so a worker on a unix socket
(`_unix_server`) never loads it. Every call (Dispatch, State, Stop) is a
stream of bytes that opens with the handshake (`pool._transport._handshake`);
a caller on loopback must also run as a trusted uid (`_peer`). Nothing a
caller sends is read before it proved itself, except its challenge, and no
gRPC message larger than `GRPC_MESSAGE_MAX_BYTES` is read at all (`_pieces`).
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from .._config._settings import ConfigError, WorkerConfig
from .._transport._framing import MESSAGE_MAX_BYTES, ProtocolError
from .._transport._handshake import TIMEOUT_S, Refused, Responder
from .._transport._peer import check_tcp_peer, loopback_host
from .._transport._pieces import Assembler, pieces
from .._transport._proto import leakypool_pb2 as pb
from .._transport._rpc import SERVER_OPTIONS, SERVICE, bind_address
from .._transport._trust import Trust
from ._keys import worker_trust
from ._peers import undecodable
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")

REQUEST_MAX_BYTES = 1 << 10
"""The largest State or Stop request read (the one is empty, the other a float)."""


def peer_address(peer: str) -> tuple[str, int] | None:
    """gRPC's name of a peer (``ipv4:127.0.0.1:5000``, ``ipv6:%5B::1%5D:5000``) as (host, port); None if not IP.

    Raises:
        Refused: an IP peer whose address does not parse (it is not let in unchecked).
    """
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = urllib.parse.unquote(rest).rpartition(":")
    if not port.isdigit() or not host:
        raise Refused(f"cannot read the caller's address {peer!r}")
    return host.strip("[]"), int(port)


def local_ends(host: str, port: int, peer_host: str) -> list[tuple[str, int]]:
    """The addresses a loopback caller at ``peer_host`` may have reached this server at (bound to ``host:port``).

    A server bound to one address was reached there; one bound to a wildcard, at a loopback address: the
    caller's own first (a connection from 127.0.0.1 usually goes to 127.0.0.1), then the usual two.
    """
    bound = host.strip("[]")
    if bound not in ("", "0.0.0.0", "::"):  # noqa: S104 - compared with, not bound to
        return [(bound, port)]
    return list(dict.fromkeys([(peer_host, port), ("127.0.0.1", port), ("::1", port)]))


def handler(service: WorkerService, trust: Trust, bound: dict[str, Any]) -> grpc.GenericRpcHandler:
    """The generic handler serving `SERVICE` with ``service``: every call proves itself with ``trust``'s keys.

    ``bound`` holds the server's ``host`` and ``port`` once it listens (a loopback caller's connection is found
    by its four-tuple).
    """
    uid = uuid.UUID(service.uid)

    async def admit(method: str, context: grpc.aio.ServicerContext) -> None:
        """The handshake; returns once the caller proved itself, else ends the call (UNAUTHENTICATED)."""
        try:
            address = peer_address(context.peer())
            loopback = None if address is None else loopback_host(address[0])
            if address is not None and loopback is not None:
                ends = local_ends(bound["host"], bound["port"], loopback)
                check_tcp_peer((loopback, address[1]), ends, trust.uids, f"the caller at {context.peer()}")
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
        except (Refused, TimeoutError) as exc:
            _log.warning("refused a caller at %s: %s", context.peer(), exc)
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"this worker runs calls only for callers that prove "
                f"they hold its secret (docs/lan-security.md): {exc}",
            )

    async def request(context: grpc.aio.ServicerContext) -> bytes | memoryview:
        piece = await context.read()
        try:
            whole = Assembler(REQUEST_MAX_BYTES).add(piece) if isinstance(piece, bytes) else None
        except ProtocolError as exc:
            whole, why = None, str(exc)
        else:
            why = "expected one request"
        if whole is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)
            raise AssertionError(why)  # (abort raised)
        return whole

    async def dispatch(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await admit("Dispatch", context)
        assembler = Assembler(MESSAGE_MAX_BYTES)

        async def read() -> object:
            while True:
                piece = await context.read()
                if not isinstance(piece, bytes):
                    return piece
                whole = assembler.add(piece)
                if whole is not None:
                    return pb.Frames.FromString(whole)

        async def write(frames: pb.Frames) -> None:
            for piece in pieces(frames.SerializeToString()):
                await context.write(piece)

        reason = await service.serve_stream(read, write, f"dispatcher {context.peer()}", benign=(grpc.RpcError,))
        if undecodable(reason, (grpc.RpcError,)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable frames: {reason}")

    async def stop(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await admit("Stop", context)
        reply = service.stop(pb.StopRequest.FromString(await request(context)))
        await context.write(next(pieces(reply.SerializeToString())))

    async def state(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await admit("State", context)
        await request(context)
        await context.write(next(pieces(service.state().SerializeToString())))

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
    server = grpc.aio.server(options=SERVER_OPTIONS)
    bound: dict[str, Any] = {"host": config.host, "port": 0}
    server.add_generic_rpc_handlers((handler(service, trust, bound),))
    address = bind_address(config.host, config.port)
    try:
        credentials = _credentials(config)
    except OSError as exc:
        raise ConfigError(f"--tls-cert/--tls-key/--tls-client-ca: cannot read: {exc}") from None
    try:
        if credentials is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, credentials)
    except RuntimeError as exc:
        raise ConfigError(f"--host/--port: cannot bind {address}: {exc}") from None
    bound["port"] = port
    await server.start()
    _log.debug("callers must prove they hold %s", trust.keyring.describe())
    return server.stop, port


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
