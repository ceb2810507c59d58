"""Start one leakypool worker: ``python worker_main.py --help`` (or ``leakypool-worker``).

A thin entry point: parse flags (each also read from ``LEAKYPOOL_<FLAG>``),
start the gRPC server, print READY, drain on SIGTERM. The logic lives in
``pool._worker._main``.
"""

from __future__ import annotations

import sys

from pool._worker._main import main

if __name__ == "__main__":
    sys.exit(main())
