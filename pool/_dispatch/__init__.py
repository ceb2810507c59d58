"""Decisions of the dispatching process: which call goes where, when, and whether at all.

    _path        one pool's call path, one owner for every decision: ceiling, limits, the balancer's order,
                 who has room, the line for a worker; a coroutine routine's call end to end
    _limits      queues, concurrency keys, workflows: FIFO gates, slot lending, Deadlock
    _rates       RateLimit on a Queue, and the in-process book calls wait in for their rate
    _membership  who joins and leaves (keeps the Roster; returns what to close)
    _route       how a worker is dialled: the pool decides (TLS off loopback), not its record
    _roster      the read-only view balancers see
    _room        who turned this pool away and has not said "room" since (the known_full hint)
    _relay       nested calls that workers send back up through the pool
    _fanout      pool.map: a sliding window over many items

Decisions here are synchronous where they can be and return what to do;
the I/O they need (a worker's Accept, closing a connection) is the
transport's, one layer down.
"""

from __future__ import annotations

from ._fanout import map as map
from ._limits import Queue as Queue
from ._membership import Membership as Membership
from ._path import CallPath as CallPath
from ._rates import RateLimit as RateLimit
from ._relay import NestedHost as NestedHost

__all__ = ["CallPath", "Membership", "NestedHost", "Queue", "RateLimit", "map"]
