"""Bytes to and from workers: the stream protocol both processes speak, and what carries it.

    _calls         a call on a stream, from the caller's side: Task, open, outcome decoding
    _session       one multiplexed stream (both ends), routing frames by call id
    _outbox        frames waiting to leave, batched per event-loop turn
    _framing       the protocol's messages on a unix socket (no HTTP/2)
    _unix_channel  the channel to a spawned worker; _grpc_channel to one over TCP (gRPC)
    _connection    one worker's connection: its channel and its stream
    _wire          values <-> bytes (the only cloudpickle importer); _malloc large-message heap tuning
    _rpc           what both ends share: service name, status codes, the worker record
    _tls           mutual TLS credentials
    _proto         the protobuf messages

Both processes import this package (the worker side: its server-side half);
it imports nothing above it.
"""
