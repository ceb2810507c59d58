"""The worker template: one interpreter that imports the worker side once, then forks workers on request.

    python -m pool._worker._template FD [MODULE ...]

Starting a worker costs an interpreter start and ~80 ms of imports
(asyncio, protobuf, cloudpickle, uvloop, this package; grpc too for a
worker over TCP, one of the MODULEs then). The pool starts this process
once; every worker after that is a ``fork()`` of it, already imported.

It is safe to fork because this process never starts a thread, an event
loop, a gRPC channel or server: it only imports, then waits on a
socketpair (``FD``, SOCK_SEQPACKET) in plain blocking calls. Each request
carries the worker's environment (JSON) and two file descriptors (SCM_RIGHTS):
the worker's READY pipe and its lifeline to the pool. The child sets that
environment as its whole ``os.environ`` and runs the worker as
``worker_main`` would; so each worker keeps its own lifeline (it exits when
the pool dies, whatever happens to the template).

Replies: ``{"pid": N}`` per request, in order, and ``{"exited": N, "code":
C}`` when a worker exits (the template is their parent and reaps them).
When the pool sends an empty message or closes the socket, the template
exits; its workers go on until their own lifelines close.

Two ways in: ``python -m`` (above: a fresh interpreter that imports the
worker side), or `main_forked`, when the pool ``fork()``ed the template
from its own process, which had no other thread (see `pool._fleet._template`):
then every module the pool had loaded is already here, and the template
first lets go of what the pool's process had running (`_leave_the_pool`).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import logging
import os
import select
import signal
import socket
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any, Literal, NoReturn

from .._base import native_threads

MAX_MESSAGE = 1 << 20


def main(fd: int, preload: list[str]) -> int:
    import importlib

    from pool._worker import _main as worker  # the point: pay the imports once, here

    for module in ("uvloop", *preload):
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # a worker that needs it will say so itself

    with socket.socket(fileno=fd) as channel:  # closed when the pool is done with us (no ResourceWarning at exit)
        return _serve(worker, channel)


def _serve(worker: Any, channel: socket.socket) -> int:
    """Fork a worker per request on ``channel`` and reap them, until the pool is done with us."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wake the select; the loop reaps
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the pool's to handle
    channel.send(json.dumps({"ready": os.getpid()}).encode())
    watched: list[socket.socket | int] = [channel, wake_r]
    while True:
        readable, _, _ = select.select(watched, [], [])
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(channel)
        if channel in readable:
            try:
                message, fds, _, _ = socket.recv_fds(channel, MAX_MESSAGE, 2)
            except ConnectionError:
                message, fds = b"", []
            if not message:
                return 0  # the pool is gone or done with us
            if threading.active_count() != 1 or native_threads() != 1:  # never fork a process with threads
                raise RuntimeError("the worker template has a thread; refusing to fork")
            pid = os.fork()
            if pid == 0:
                _child(worker, json.loads(message), fds, channel, wake_r, wake_w)
            for descriptor in fds:
                os.close(descriptor)
            channel.send(json.dumps({"pid": pid}).encode())


def _reap(channel: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            channel.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            pass  # the pool is gone; keep reaping


def _child(worker, env: dict[str, str], fds: list[int], channel: socket.socket, wake_r: int, wake_w: int) -> NoReturn:
    """In the forked child: become a worker with ``env`` and the passed pipes; never return."""

    def become_worker() -> int:
        channel.close()
        os.close(wake_r)
        os.close(wake_w)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ready_fd, lifeline_fd = fds
        os.environ.clear()
        os.environ.update(env)
        os.environ["LEAKYPOOL_READY_FD"] = str(ready_fd)
        os.environ["LEAKYPOOL_LIFELINE_FD"] = str(lifeline_fd)
        for path in reversed(env.get("PYTHONPATH", "").split(os.pathsep)):
            if path and path not in sys.path:
                sys.path.insert(0, path)  # the pool's import path now, not when the template started
        return worker.main([])

    _run_then_exit(become_worker)


def _run_then_exit(run: Callable[[], int]) -> NoReturn:
    """Run ``run`` in a forked child, then leave with its status without unwinding into the parent's frames."""
    code = 1
    try:
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the forked child prints any fault and exits with the code below
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


_INHERITED: list[Any] = []
"""What the pool's process left us that must not be finalized here (closing a log handler or a stream closes its file)."""


def main_forked(fd: int, preload: list[str], inherited: dict[int, tuple[int, int]], mask: set[int]) -> NoReturn:
    """Run as the template in a child ``fork()``ed from the pool's own process; never returns.

    Args:
        fd: The template's end of its socket to the pool.
        preload: As for `main`.
        inherited: The pool's descriptors at the fork, by identity (to close).
        mask: The signal mask to restore (the pool blocked every signal across the fork).
    """

    def become_template() -> int:
        _leave_the_pool(inherited, keep={0, 1, 2, fd})
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return contextvars.Context().run(main, fd, preload)  # none of the pool's context variables

    _run_then_exit(become_template)


def _leave_the_pool(inherited: dict[int, tuple[int, int]], keep: set[int]) -> None:
    """Make this fork of the pool's process start like a fresh interpreter, as far as a worker can tell.

    The pool's objects stay, untouched: `gc.freeze` keeps any collection
    from finalizing one (a finalizer could close a descriptor number that
    is reused by then), and keeps their pages shared with the pool. What
    the pool had running is dropped: its event loop, signal handlers,
    descriptors (all it had at the fork but stdio and our socket; what
    at-fork handlers made anew, such as libuv's signal pipe, stays), the
    handlers and levels of the root and ``leakypool`` loggers, warning
    filters, trace hooks, and GC settings. Standard streams are new objects
    on descriptors 0-2, and stdin is /dev/null. Other libraries' module
    state is the pool's, as after any fork.
    """
    gc.freeze()
    asyncio.events._set_running_loop(None)  # the fork happened inside the pool's loop (Python 3.12 does this itself)
    asyncio.set_event_loop(None)
    signal.set_wakeup_fd(-1)
    for sig in signal.valid_signals():
        try:
            if callable(signal.getsignal(sig)):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass  # not settable (SIGKILL, SIGSTOP, real-time signals in use)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the pool's to handle
    _close_inherited(inherited, keep)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    _INHERITED.extend((sys.stdin, sys.stdout, sys.stderr))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own, for its whole life
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False, errors="backslashreplace")  # noqa: SIM115
    _reset_logging()
    warnings.resetwarnings()
    for action, category, module in _DEFAULT_WARNING_FILTERS:
        warnings.filterwarnings(action, category=category, module=module, append=True)
    sys.settrace(None)
    sys.setprofile(None)
    threading.settrace(None)
    threading.setprofile(None)
    gc.enable()
    gc.set_threshold(700, 10, 10)


_DEFAULT_WARNING_FILTERS: list[tuple[Literal["default", "ignore"], type[Warning], str]] = [
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
]
"""A fresh interpreter's warning filters (release build, no -W, no PYTHONWARNINGS)."""


def _close_inherited(inherited: dict[int, tuple[int, int]], keep: set[int]) -> None:
    for fd, identity in inherited.items():
        if fd in keep:
            continue
        try:
            stat = os.fstat(fd)
        except OSError:
            continue
        if (stat.st_dev, stat.st_ino) == identity:  # still the pool's (not remade by an at-fork handler)
            os.close(fd)


def _reset_logging() -> None:
    """Drop the root and ``leakypool`` loggers' handlers and levels (the worker sets its own up).

    The handlers are kept referenced, never closed: closing one would close its stream.
    """
    logging.disable(logging.NOTSET)
    loggers = [logging.getLogger()] + [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and (name == "leakypool" or name.startswith("leakypool."))
    ]
    for logger in loggers:
        _INHERITED.extend(logger.handlers)
        logger.handlers.clear()
        logger.setLevel(logging.NOTSET)
        logger.disabled = False
        logger.propagate = True
    logging.getLogger().setLevel(logging.WARNING)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2:]))
