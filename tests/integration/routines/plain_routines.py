"""Plain ``def`` routines the integration tests run on real workers (imported by name there).

`gate` blocks its worker's plain thread until the test lets it go, over a
socket (`Gate`), so tests wait on events rather than on sleeps.
"""

from __future__ import annotations

import os
import socket
import time
import zlib

import pool


@pool.routine
def crc(block: bytes, *, start: int = 0) -> int:
    return zlib.crc32(block, start)


@pool.routine
def plain_pid() -> int:
    return os.getpid()


@pool.routine
def fail(message: str) -> None:
    raise LookupError(message)


@pool.routine
def burn(seconds: float) -> int:
    """Spin the CPU in pure Python for ``seconds``; returns the worker's pid."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return os.getpid()


@pool.routine
def gate(address: tuple[str, int], label: str = "") -> int:
    """Connect to the test's `Gate`, say ``label``, block until it answers; returns the worker's pid."""
    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(f"{label or os.getpid()}\n".encode())
        conn.recv(1)  # the test lets it go (or closes the gate)
    return os.getpid()


@pool.routine
def hang(address: tuple[str, int]) -> None:
    """Say so on the gate, then block forever (only a hard timeout ends it)."""
    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(b"hanging\n")
        while True:
            time.sleep(3600)


@pool.routine
def backtrack(address: tuple[str, int], n: int = 40) -> bool:
    """Say so on the gate, then hold the GIL in C for a very long time (a regex that backtracks)."""
    import re

    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(b"backtracking\n")
    return re.match(r"(a+)+$", "a" * n + "b") is not None


@pool.routine
def record(path: str, label: str, address: tuple[str, int] | None = None) -> int:
    """Append ``label`` to the file at ``path`` (the call's side effect), then block at the gate if given; the pid."""
    with open(path, "a") as f:
        f.write(f"{label}\n")
    if address is not None:
        with socket.create_connection(address, timeout=60) as conn:
            conn.sendall(f"{label}\n".encode())
            conn.recv(1)
    return os.getpid()


@pool.routine
def record_hang(path: str, label: str, address: tuple[str, int]) -> None:
    """Append ``label`` to ``path``, say so on the gate, then block forever (only a hard timeout ends it)."""
    with open(path, "a") as f:
        f.write(f"{label}\n")
    with socket.create_connection(address, timeout=60) as conn:
        conn.sendall(f"{label}\n".encode())
        while True:
            time.sleep(3600)


@pool.routine
def record_die(path: str, label: str) -> None:
    """Append ``label`` to ``path``, then end the worker's process at once (no cleanup, no answer)."""
    with open(path, "a") as f:
        f.write(f"{label}\n")
    os._exit(3)
