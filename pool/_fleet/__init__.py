"""Capacity the pool starts itself: worker processes on this host, and where they come from.

    _local_fleet   LocalFleet: keep a minimum, replace the dead, grow under load, stop
    _local_worker  one spawned worker process: READY pipe, lifeline, stop, reap
    _template      the pool's side of the worker template (fork requests, exit statuses)
"""
