"""What a call is, on either side of the stream: the task that travels, where it goes, how it ends.

    _task        Task: one routine call as it travels, and as balancers and backpressure hooks see it
    _dispatcher  the Dispatcher protocol, and the one current in this context (a pool, or a worker's upstream)
    _calls       the caller's side of a call: open it on a stream, read its replies, decode its outcome
    _connection  the dispatching side's connection to one worker: its channel, its stream, opening calls on it

Both processes import `_task`, `_dispatcher` and `_calls` (a worker calls routines upstream); `_connection`
is the dispatching side's only. It stands on `pool._transport` (bytes) and `pool._base`.
"""
