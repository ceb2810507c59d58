"""The worker service over gRPC (TCP, optionally mutual TLS): what a worker on the LAN or a ``--port`` serves.

The only worker module that imports grpc, so a worker on a unix socket
(`_unix_server`) never loads it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from .._config import ConfigError, WorkerConfig
from .._transport._proto import leakypool_pb2 as pb
from .._transport._rpc import SERVER_OPTIONS, SERVICE, bind_address
from ._peers import undecodable
from ._service import WorkerService


def handler(service: WorkerService) -> grpc.GenericRpcHandler:
    """The generic handler serving `SERVICE` with ``service``."""

    async def dispatch(requests: Any, context: grpc.aio.ServicerContext) -> None:
        reason = await service.serve_stream(
            context.read, context.write, f"dispatcher {context.peer()}", benign=(grpc.RpcError,)
        )
        if undecodable(reason, (grpc.RpcError,)):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"undecodable frames: {reason}")

    async def stop(request: pb.StopRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        return service.stop(request)

    async def state(request: pb.StateRequest, context: grpc.aio.ServicerContext) -> pb.WorkerState:
        return service.state()

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Dispatch": grpc.stream_stream_rpc_method_handler(dispatch, pb.Frames.FromString, pb.Frames.SerializeToString),
            "Stop": grpc.unary_unary_rpc_method_handler(stop, pb.StopRequest.FromString, pb.WorkerState.SerializeToString),
            "State": grpc.unary_unary_rpc_method_handler(state, pb.StateRequest.FromString, pb.WorkerState.SerializeToString),
        },
    )


async def start(config: WorkerConfig, service: WorkerService) -> tuple[Callable[[float | None], Awaitable[None]], int]:
    """Serve ``service`` on ``--host``/``--port``; returns how to stop the server (grace in s) and its port.

    Raises:
        ConfigError: the address cannot be bound, or the TLS files read.
    """
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler(service),))
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
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None)
