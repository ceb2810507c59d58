"""Bytes to and from workers: the stream protocol both processes speak, and what carries it.

    _session       one multiplexed stream (both ends), routing frames by call id; _outgoing a call it opened
    _outbox        frames waiting to leave, batched per event-loop turn
    _framing       the protocol's messages on a unix socket (no HTTP/2); _through its writes from other threads
    _framer        the one framing (a 4-byte length, then the message): bytes in, messages out, no I/O
    _unix_channel  the channel to a spawned worker; _grpc_channel to one over TCP (gRPC)
    _wire          values <-> bytes (the only cloudpickle importer); _malloc large-message heap tuning
    _buffers       large buffers beside the stream: memfd regions; _side the connection their descriptors cross
    _chunks        large buffers in chunks on the stream itself (a peer with no side connection: gRPC)
    _rpc           what both ends share: service name, status codes, the worker record
    _tls           mutual TLS credentials; _secret the secrets both ends hold (per user, or a pool's own)
    _stream_seal   a stream's messages sealed where TLS does not protect it (off loopback, insecure)
    _seal          what a store keeps, sealed with the secret for its row and field, checked before it is loaded
    _handshake     the HMAC challenge both ends answer on every connection; _trust a keyring and the trusted uids
    _peer          the uid at the other end of a unix socket or a loopback connection
    _pieces        gRPC messages kept small: larger ones cross in pieces
    _proto         the protobuf messages

What a call is (Task, opening one, decoding its outcome, a worker's connection) is pool._call's, above this.

Both processes import this package (the worker side: its server-side half);
it imports nothing above it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._base import lazy_attribute
from . import _buffers as buffers
from . import _malloc as malloc
from . import _side as side
from . import _wire as wire
from ._framer import Framer as Framer
from ._framer import ProtocolError as ProtocolError
from ._framer import framed as framed
from ._framer import message_size as message_size
from ._framing import HELLO_MAX_BYTES as HELLO_MAX_BYTES
from ._framing import MESSAGE_MAX_BYTES as MESSAGE_MAX_BYTES
from ._framing import MessageStream as MessageStream
from ._framing import method_of as method_of
from ._handshake import HANDSHAKE_MAX_BYTES as HANDSHAKE_MAX_BYTES
from ._handshake import TIMEOUT_S as TIMEOUT_S
from ._handshake import Keyring as Keyring
from ._handshake import Refused as Refused
from ._handshake import Responder as Responder
from ._outbox import Write as Write
from ._outbox import WriteNow as WriteNow
from ._outgoing import FINAL_OUTCOMES as FINAL_OUTCOMES
from ._outgoing import QUEUED as QUEUED
from ._outgoing import HandedBack as HandedBack
from ._outgoing import OutgoingCall as OutgoingCall
from ._peer import check_unix as check_unix
from ._peer import loopback_host as loopback_host
from ._peer import tcp_owner as tcp_owner
from ._peer import trusted_uids as trusted_uids
from ._pieces import Assembler as Assembler
from ._pieces import pieces as pieces
from ._proto import leakypool_pb2 as leakypool_pb2
from ._rpc import FAILED_PRECONDITION as FAILED_PRECONDITION
from ._rpc import LATE_MESSAGE as LATE_MESSAGE
from ._rpc import MISMATCH_MESSAGE as MISMATCH_MESSAGE
from ._rpc import RESOURCE_EXHAUSTED as RESOURCE_EXHAUSTED
from ._rpc import SERVER_OPTIONS as SERVER_OPTIONS
from ._rpc import SERVICE as SERVICE
from ._rpc import TRANSIENT_CODES as TRANSIENT_CODES
from ._rpc import UNAVAILABLE as UNAVAILABLE
from ._rpc import WorkerMetadata as WorkerMetadata
from ._rpc import bind_address as bind_address
from ._rpc import status_name as status_name
from ._seal import MAC_BYTES as MAC_BYTES
from ._seal import MAGIC as MAGIC
from ._seal import Seal as Seal
from ._seal import is_sealed as is_sealed
from ._secret import SecretSource as SecretSource
from ._secret import spawn_key as spawn_key
from ._session import CallHost as CallHost
from ._session import Read as Read
from ._session import Session as Session
from ._stream_seal import StreamSeal as StreamSeal
from ._trust import Trust as Trust
from ._wire import INTERPRETER as INTERPRETER

if TYPE_CHECKING:
    from ._grpc_channel import GrpcChannel as GrpcChannel
    from ._tls import TlsCredentials as TlsCredentials
    from ._unix_channel import UnixChannel as UnixChannel

LAZY = {"GrpcChannel": "._grpc_channel", "TlsCredentials": "._tls", "UnixChannel": "._unix_channel"}
"""Names whose modules load on first use (`pool._base._lazy`): the dispatching side's channels (gRPC loads only for TCP workers)."""


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, LAZY, globals(), name)


__all__ = [
    "FAILED_PRECONDITION",
    "FINAL_OUTCOMES",
    "HANDSHAKE_MAX_BYTES",
    "HELLO_MAX_BYTES",
    "INTERPRETER",
    "LATE_MESSAGE",
    "MAC_BYTES",
    "MAGIC",
    "MESSAGE_MAX_BYTES",
    "MISMATCH_MESSAGE",
    "QUEUED",
    "RESOURCE_EXHAUSTED",
    "SERVER_OPTIONS",
    "SERVICE",
    "TIMEOUT_S",
    "TRANSIENT_CODES",
    "UNAVAILABLE",
    "Assembler",
    "CallHost",
    "Framer",
    "GrpcChannel",
    "HandedBack",
    "Keyring",
    "MessageStream",
    "OutgoingCall",
    "ProtocolError",
    "Read",
    "Refused",
    "Responder",
    "Seal",
    "SecretSource",
    "Session",
    "StreamSeal",
    "TlsCredentials",
    "Trust",
    "UnixChannel",
    "WorkerMetadata",
    "Write",
    "WriteNow",
    "bind_address",
    "buffers",
    "check_unix",
    "framed",
    "is_sealed",
    "leakypool_pb2",
    "loopback_host",
    "malloc",
    "message_size",
    "method_of",
    "pieces",
    "side",
    "spawn_key",
    "status_name",
    "tcp_owner",
    "trusted_uids",
    "wire",
]
