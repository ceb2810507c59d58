"""The worker service over gRPC (TCP, optionally mutual TLS): what a worker on the LAN or a ``--port`` serves.

The only worker module that imports grpc, so a worker on a unix socket
(`_unix_server`) never loads it. Every call must carry the worker's secret
(`required_secret`; see `pool._transport._secret`): one without it, or with
another, is refused with ``UNAUTHENTICATED`` before anything it sent is read.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from .._config._places import default_secret_file
from .._config._settings import ConfigError, WorkerConfig
from .._transport._proto import leakypool_pb2 as pb
from .._transport._rpc import SERVER_OPTIONS, SERVICE, bind_address
from .._transport._secret import METADATA_KEY, load_or_create, matches, presented, read_file
from ._peers import undecodable
from ._service import WorkerService

_log = logging.getLogger("leakypool.worker")


def required_secret(config: WorkerConfig) -> str | None:
    """The secret callers must present; None: no check.

    ``LEAKYPOOL_SECRET``, else ``--secret-file``, else (unless client
    certificates already say who may call, or ``--no-secret``) this user's
    own secret, made on first use.

    Raises:
        ConfigError: the secret file cannot be read or made, or is not private.
    """
    if config.no_secret:
        return None
    if config.secret:
        return config.secret
    if config.secret_file:
        return read_file(config.secret_file)
    if config.tls_client_ca:
        return None  # mutual TLS: a caller's certificate is its credential
    return load_or_create(default_secret_file())


def handler(service: WorkerService, secret: str | None = None) -> grpc.GenericRpcHandler:
    """The generic handler serving `SERVICE` with ``service``; with ``secret``, every call must carry it."""

    async def admit(context: grpc.aio.ServicerContext) -> None:
        if secret is None:
            return
        given = presented(context.invocation_metadata())
        if matches(secret, given):
            return
        why = "no secret" if given is None else "a wrong secret"
        _log.warning("refused a caller at %s: it presented %s (%s)", context.peer(), why, METADATA_KEY)
        await context.abort(
            grpc.StatusCode.UNAUTHENTICATED,
            f"this worker runs calls only for callers that present its secret; this one presented {why} "
            "(give the pool the worker's secret: secret= / LEAKYPOOL_SECRET / LEAKYPOOL_SECRET_FILE; see docs/lan-security.md)",
        )

    async def dispatch(requests: Any, context: grpc.aio.ServicerContext) -> None:
        await admit(context)
        reason = await service.serve_stream(
            context.read, context.write, f"dispatcher {context.peer()}", benign=(grpc.RpcError,)
        )
        if undecodable(reason, (grpc.RpcError,)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable frames: {reason}")

    async def stop(request: pb.StopRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        await admit(context)
        return service.stop(request)

    async def state(request: pb.StateRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        await admit(context)
        return service.state()

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Dispatch": grpc.stream_stream_rpc_method_handler(
                dispatch, pb.Frames.FromString, pb.Frames.SerializeToString
            ),
            "Stop": grpc.unary_unary_rpc_method_handler(
                stop, pb.StopRequest.FromString, pb.WorkerState.SerializeToString
            ),
            "State": grpc.unary_unary_rpc_method_handler(
                state, pb.StateRequest.FromString, pb.WorkerState.SerializeToString
            ),
        },
    )


async def start(config: WorkerConfig, service: WorkerService) -> tuple[Callable[[float | None], Awaitable[None]], int]:
    """Serve ``service`` on ``--host``/``--port``; returns how to stop the server (grace in s) and its port.

    Raises:
        ConfigError: the address cannot be bound, or the TLS files read.
    """
    secret = required_secret(config)
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler(service, secret),))
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
    await server.start()
    if config.no_secret:
        _log.warning(
            "accepting callers WITHOUT a secret on %s (--no-secret): every user who reaches this port can run code here",
            bind_address(config.host, port),
        )
    elif secret is None:
        _log.debug("callers must present a client certificate signed by --tls-client-ca")
    else:
        _log.debug(
            "callers must present the secret in %s",
            "LEAKYPOOL_SECRET" if config.secret else config.secret_file or default_secret_file(),
        )
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
