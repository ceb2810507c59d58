"""pool.Executor from plain synchronous code: submit, map in chunks, an error, a worker that dies.

The standard library's ``concurrent.futures`` interface, on leakypool workers:
code written for ``ProcessPoolExecutor`` runs unchanged, and a worker that
dies fails only its own call while the executor goes on (the standard
library's pool would be broken for good).

    python examples/executor.py [--workers 2] [--items 1000]
"""

from __future__ import annotations

import argparse
import os
import zlib

import pool


def crc(block: bytes) -> int:
    """A CPU-bound plain function."""
    return zlib.crc32(block)


def crash() -> None:
    """Take the worker down, as a segfault in a C extension would."""
    os._exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description="pool.Executor from synchronous code")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--items", type=int, default=1000, help="blocks to checksum with map")
    args = parser.parse_args()

    with pool.Executor(max_workers=args.workers) as ex:
        print("2 ** 8 =", ex.submit(pow, 2, 8).result())

        blocks = [i.to_bytes(4, "big") * 256 for i in range(args.items)]
        checksums = list(ex.map(crc, blocks, chunksize=64))  # one worker call per 64 blocks
        print(f"checksummed {len(checksums)} blocks, in order: {checksums[:2] == [crc(b) for b in blocks[:2]]}")

        try:
            ex.submit(int, "not a number").result()
        except ValueError as exc:  # the function's own exception, its worker traceback as __cause__
            print("ValueError from the worker:", exc)

        lost = ex.submit(crash)
        try:
            lost.result()
        except pool.WorkerBroken:
            print("the crashed worker failed only its own call")
        print("and the executor goes on:", ex.submit(sum, [1, 2, 3]).result())


if __name__ == "__main__":
    main()
