"""Run joblib's own ``test_parallel.py`` with the "leakypool" backend registered; print what passed.

joblib parametrises its backend-generic tests over every registered backend
at import time, so registering ours first (a pytest plugin) adds it to them.
Only the cases that name "leakypool" run (``-k leakypool``). Not part of the
suite (it takes minutes); issue 33's closing note lists the outcome::

    python tools/joblib_conformance.py [--timeout 60] [extra pytest args]
"""

from __future__ import annotations

import argparse
import sys

import pytest


class RegisterLeakypool:
    """A pytest plugin: registers the backend before joblib's test module is collected."""

    def pytest_configure(self, config: pytest.Config) -> None:
        import pool.joblib

        pool.joblib.register()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=int, default=60, help="seconds per test")
    args, rest = parser.parse_known_args()
    return pytest.main(
        [
            "--pyargs",
            "joblib.test.test_parallel",
            "-k",
            "leakypool",
            "-q",
            "-rfEs",
            "-p",
            "no:cacheprovider",
            "--timeout",
            str(args.timeout),
            "-o",
            "addopts=",
            "-o",
            "filterwarnings=",
            "--rootdir",
            "/",
            *rest,
        ],
        plugins=[RegisterLeakypool()],
    )


if __name__ == "__main__":
    sys.exit(main())
