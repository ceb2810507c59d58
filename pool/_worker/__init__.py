"""The worker process: everything that runs inside ``leakypool-worker`` and nowhere else.

    _main        process entry: config in, server up, READY out, drain on signal
    _preflight   settings checked before serving, and what they decide: the hook, its capacity, inline routines
    _service     the service: streams, State/Stop, wiring of the parts below
    _unix_server the service on a unix socket, framed messages (a pool's own workers)
    _gate        a unix-socket connection until its dialler proved itself (the handshake, bounded reads)
    _keys        the worker's secret and the uids it lets in
    _grpc_server the service over gRPC on TCP (the only worker module importing grpc)
    _door        the TCP port: each connection judged (uid, caps per peer, a deadline to prove itself), then relayed to gRPC
    _admission   worker-side admission: the backpressure verdict and "room" notices (no I/O)
    _lifecycle   idle timeout, max lifetime, drains
    _runner      where routines run: unpickle, run, pickle the outcome
    _overrun     routines on the main loop, and the watch thread that answers for it (unix socket)
    _upstream    nested dispatch: a routine here calls a routine, back up its stream
    _threads     the routine loop thread and the hops to it (a worker serving gRPC)
    _hosted      a call this worker hosts, as both of its loops see it
    _plain       plain ``def`` routines: the line of them and the thread it runs on, one at a time
    _plain_calls the service's side of plain calls: queued ones, handbacks, deadlines, their books
    _peers       the dispatchers a worker serves: one Peer per stream
    _state       what a worker says about itself (the State RPC); _signals the resource signals hooks read
    _recycle     the initializer, task and memory limits, retiring on purpose
    _native_threads  BLAS and OpenMP thread pools capped at what the pool gives each worker (as loky does)
    _release     memory a large call left behind, given back once the worker is idle
    _template    the worker template: imports once, forks workers on request
    _registry    --registry: the worker's row in a store registry; _metrics --metrics-port; _trace its spans

Nothing outside this package imports it (a test enforces it); it imports
only what both sides share (`_rpc`, `_session`, `_calls`, `_wire`,
`_errors`, `_config`, and the discovery publishers).
"""
