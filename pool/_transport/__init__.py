"""Bytes to and from workers: the stream protocol both processes speak, and what carries it.

    _session       one multiplexed stream (both ends), routing frames by call id; _outgoing a call it opened
    _outbox        frames waiting to leave, batched per event-loop turn
    _framing       the protocol's messages on a unix socket (no HTTP/2); _through its writes from other threads
    _unix_channel  the channel to a spawned worker; _grpc_channel to one over TCP (gRPC)
    _wire          values <-> bytes (the only cloudpickle importer); _malloc large-message heap tuning
    _buffers       large buffers beside the stream: memfd regions; _side the connection their descriptors cross
    _chunks        large buffers in chunks on the stream itself (a peer with no side connection: gRPC)
    _rpc           what both ends share: service name, status codes, the worker record
    _tls           mutual TLS credentials; _secret the secrets both ends hold (per user, or a pool's own)
    _seal          what a store keeps, sealed with the secret for its row and field, checked before it is loaded
    _handshake     the HMAC challenge both ends answer on every connection; _trust a keyring and the trusted uids
    _peer          the uid at the other end of a unix socket or a loopback connection
    _pieces        gRPC messages kept small: larger ones cross in pieces
    _proto         the protobuf messages

What a call is (Task, opening one, decoding its outcome, a worker's connection) is pool._call's, above this.

Both processes import this package (the worker side: its server-side half);
it imports nothing above it.
"""
