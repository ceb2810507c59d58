"""Run CPython's own concurrent.futures tests against `pool.Executor`, beside `ProcessPoolExecutor` as a control.

    .venv-3.13/bin/python tools/stdlib_futures.py [-k SUBSTRING] [--out FILE.json] [--tests FILE]

The interpreter's ``Lib/test/test_concurrent_futures`` (a package from 3.12 on; CPython's ``test``
package must be installed: pyenv builds have it, Debian's is ``libpython3.X-testsuite``) is loaded
unchanged; ``--tests`` names a 3.11-style single module instead (``.venv/bin/python
tools/stdlib_futures.py --tests /usr/lib/python3.11/test/test_concurrent_futures.py``, the file from
Debian's ``libpython3.11-testsuite``; the interpreter's ``test.support`` must be there). Every ProcessPool test class (the fork, forkserver and spawn mixins) runs twice, each in a
fresh interpreter: once as shipped (the control), once with the mixins' ``executor_type`` swapped for
`pool.Executor` (``mp_context`` dropped: its workers do not come from multiprocessing). Thread pool
tests and tests of ``Future`` alone are left out: they do not touch an executor of ours.

Prints JSON: per run, the counts and each test that failed or erred (with the last line of its
error); then the tests the control passes and `pool.Executor` does not, in three groups: ``accepted``
(a difference docs/from-concurrent-futures.md lists as deliberate), ``artefacts`` (a test this swap
cannot judge, with why) and ``unexplained`` (a difference to fix: empty at the last run). Tests that
only read `ProcessPoolExecutor`'s private names (``_processes``, ``_executor_manager_thread``,
``_call_queue``, ``_RemoteTraceback``...) are counted apart: they cannot pass on any other executor.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import Any

PRIVATE = (
    "_processes",
    "_executor_manager_thread",
    "_call_queue",
    "_mp_context",
    "_result_queue",
    "_work_ids",
    "_RemoteTraceback",
)
"""Names of ProcessPoolExecutor's own making that a test may read: such a failure is not a difference."""

ACCEPTED: dict[str, str] = {
    "test_error_at_task_unpickle": "an argument that cannot be unpickled fails only its own future",
    "test_error_during_result_unpickle_in_result_handler": "a result that cannot be unpickled fails only its future",
    "test_initializer": "a multiprocessing.Queue in initargs cannot reach workers that are not the caller's children",
    "test_cancel_futures": "shutdown(cancel_futures=True) cancels every call no worker began (here: all of them)",
}
"""Tests that meet a difference docs/from-concurrent-futures.md lists as deliberate ("Accepted differences")."""

ARTEFACTS: dict[str, str] = {
    "test_interpreter_shutdown": "its child process imports the executor by name from concurrent.futures",
    "test_submit_after_interpreter_shutdown": "its child process imports the executor by name from concurrent.futures",
    "test_hang_gh83386": "its child process imports the executor by name from concurrent.futures",
    "test_python_finalization_error": "it mocks the standard library's own thread creation",
    "test_max_tasks_per_child": "the fork context's refusal of max_tasks_per_child (there is no mp_context here)",
}
"""Tests this swap cannot judge, and why (their behaviour is covered by tests/integration/executor)."""


MODULE = "test.test_concurrent_futures"
"""The interpreter's own tests (a package from 3.12 on); ``--tests FILE`` runs a 3.11-style single module instead,
imported as `LOOSE` from a directory on PYTHONPATH, so that workers import its functions too."""

LOOSE = "test_concurrent_futures"


def _suite(pattern: str, module: str) -> unittest.TestSuite:
    loader = unittest.defaultTestLoader
    suite = loader.loadTestsFromName(module)
    kept = unittest.TestSuite()

    def walk(tests: unittest.TestSuite) -> None:
        for test in tests:
            if isinstance(test, unittest.TestSuite):
                walk(test)
            elif "ProcessPool" in type(test).__name__ and pattern in test.id():
                kept.addTest(test)

    walk(suite)
    return kept


def _swap(module: str) -> None:
    """Make every ProcessPool mixin build a `pool.Executor` (``mp_context`` dropped)."""
    import importlib

    import pool

    util = importlib.import_module(f"{module}.util" if module == MODULE else module)  # where the mixins are

    class Executor(pool.Executor):
        def __init__(self, max_workers: int | None = None, mp_context: Any = None, **options: Any) -> None:
            super().__init__(max_workers, **options)

    for mixin in (util.ProcessPoolForkMixin, util.ProcessPoolForkserverMixin, util.ProcessPoolSpawnMixin):
        mixin.executor_type = Executor


def _last_line(trace: str) -> str:
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def run(kind: str, pattern: str, module: str = MODULE) -> dict[str, Any]:
    """In this process: run the suite for ``kind`` ("pool" or "stdlib") and return what happened."""
    if kind == "pool":
        _swap(module)
    suite = _suite(pattern, module)
    result = unittest.TestResult()
    started = time.monotonic()
    with open(os.devnull, "w") as quiet:
        saved = sys.stderr
        sys.stderr = quiet  # the tests' own noise (tracebacks the workers print)
        try:
            suite.run(result)
        finally:
            sys.stderr = saved
    broken = {test.id(): _last_line(trace) for test, trace in result.failures + result.errors}
    private = sorted(name for name, line in broken.items() if any(attr in line for attr in PRIVATE))
    return {
        "kind": kind,
        "python": ".".join(map(str, sys.version_info[:3])),
        "ran": result.testsRun,
        "skipped": len(result.skipped),
        "failed": len(broken),
        "seconds": round(time.monotonic() - started, 1),
        "broken": broken,
        "private_attributes": private,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("pool", "stdlib"), help="one run, in this process")
    parser.add_argument("-k", default="", help="only tests whose id contains this")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--tests", help="a single-module test_concurrent_futures.py (3.11's) to run instead")
    args = parser.parse_args()
    if args.only:
        text = json.dumps(run(args.only, args.k, LOOSE if args.tests else MODULE))
        if args.out:  # (the tests print on stdout too)
            with open(args.out, "w") as out:
                out.write(text)
        else:
            print(text)
        return
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        env = dict(os.environ)
        extra = []
        if args.tests:
            shutil.copy(args.tests, os.path.join(scratch, f"{LOOSE}.py"))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, (scratch, env.get("PYTHONPATH"))))
            extra = ["--tests", args.tests]
        for kind in ("stdlib", "pool"):
            path = os.path.join(scratch, f"{kind}.json")
            done = subprocess.run(
                [sys.executable, __file__, "--only", kind, "-k", args.k, "--out", path, *extra],
                capture_output=True,
                text=True,
                timeout=3600,
                check=False,
                env=env,
            )
            if done.returncode or not os.path.exists(path):
                raise SystemExit(f"the {kind} run failed ({done.returncode}):\n{done.stderr[-3000:]}")
            with open(path) as result:
                runs[kind] = json.load(result)
    control, ours = runs["stdlib"], runs["pool"]
    differences = sorted(
        name for name in ours["broken"] if name not in control["broken"] and name not in ours["private_attributes"]
    )
    kinds: dict[str, dict[str, str]] = {"accepted": {}, "artefacts": {}, "unexplained": {}}
    for name in differences:
        method = name.rsplit(".", 1)[-1]
        if method in ACCEPTED:
            kinds["accepted"][name] = ACCEPTED[method]
        elif method in ARTEFACTS:
            kinds["artefacts"][name] = ARTEFACTS[method]
        else:
            kinds["unexplained"][name] = ours["broken"][name]
    report = {
        "runs": runs,
        "private_attribute_tests": len(ours["private_attributes"]),
        **kinds,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as out:
            out.write(text + "\n")


if __name__ == "__main__":
    main()
