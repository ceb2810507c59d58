"""A worker's two event loops and the hops between them (a worker that serves gRPC).

A worker reached over gRPC serves it on its main thread's loop and runs
routines on a second loop in its own thread (a pool's own workers run them
on the main loop instead: `_overrun`). A routine that hogs the CPU then only
holds the GIL, which Python hands over every switch interval (5 ms), so
the gRPC loop can still read, accept or reject, and answer in
milliseconds (DESIGN: "a busy worker can still say no").

Callbacks cross between the loops through a `Hop`, which wakes the other
loop once per batch instead of once per callback.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("leakypool.worker")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop where uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a default dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Hop:
    """Runs callbacks on ``loop`` from any thread, many per wake-up."""

    __slots__ = ("_items", "_lock", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._scheduled = False

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; order is preserved."""
        with self._lock:
            self._items.append((fn, args))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.call_soon_threadsafe(self._drain)
        except RuntimeError:  # the loop has closed: the worker is exiting
            _log.debug("dropped %d callbacks for a closed loop", len(self._items))

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for fn, args in items:
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one callback's fault is logged; the rest still run
                _log.exception("callback %r failed", fn)


class LoopThread:
    """A daemon thread running its own event loop until `stop`."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self.hop = Hop(self.loop)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start the thread; the loop accepts callbacks at once."""
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop, wait for the thread (at most ``timeout`` s), close the loop."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            try:
                pending = asyncio.all_tasks(self.loop)
                for task in pending:
                    task.cancel()
                if pending:
                    self.loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()
