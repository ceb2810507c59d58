"""Tests that what an older release wrote still loads (`pool._transport._wire.loads`), and what this one writes
names only public paths, so private modules can move without breaking a stored job (issue 41).

The fixtures (tests/fixtures/wire_2026_11) were written by the release of
2026-11-27, which named private modules (``pool._call_options.CallOptions``,
``pool._routine._variant``, ``pool._dispatch._limits.Queue``).
"""

from __future__ import annotations

import asyncio
import pathlib
import pickletools
import re
import subprocess
import sys

import pytest

import pool
from pool._jobs._codec import decode, reseal
from pool._transport import _wire
from tests.fixtures.wire_2026_11 import routines
from tests.sealing import SEAL

FIXTURES = pathlib.Path(routines.__file__).parent
FIXTURE_PYTHON = (3, 11)
"""The Python that wrote the fixtures: a function pickled by value (cloudpickle) carries that Python's bytecode."""
_PRIVATE = re.compile(r"^pool(\.\w+)*\._")


def _fixture(name: str) -> bytes:
    return (FIXTURES / f"{name}.bin").read_bytes()


def private_names(data: bytes) -> set[str]:
    """The module paths with a private part (``._``) that a pickle names."""
    return {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str) and _PRIVATE.match(arg)}


class TestOlderRelease:
    def test_an_importable_routine_should_load_as_itself(self):
        """Test the blob of an importable routine (its name) loads as that routine."""
        assert _wire.loads(_fixture("routine"), what="fixture") is routines.add

    def test_a_routine_by_value_should_load_with_its_options(self):
        """Test a routine carried by value (function, CallOptions, Queue, RateLimit) loads and runs."""
        loaded = _wire.loads(_fixture("routine_by_value"), what="fixture")
        options = loaded.call_options
        assert (options.timeout, options.key, options.retries, options.retry_on) == (5.0, "tenant", 2, (ValueError,))
        assert (options.queue.name, options.queue.concurrency, options.queue.rate.n) == ("api", 2, 10)
        if sys.version_info[:2] == FIXTURE_PYTHON:  # its bytecode runs only there: 3.11's crashes 3.13 (a segfault)
            assert asyncio.run(loaded.__wrapped__(1)) == 11

    @pytest.mark.parametrize("name", ["routine_variant", "routine_variant_private_queue"])
    def test_a_routine_with_options_should_load_as_a_variant_of_the_routine(self, name):
        """Test a routine value with options (pickled through ``_variant``) loads with its base and options."""
        loaded = _wire.loads(_fixture(name), what="fixture")
        assert loaded.__wrapped__ is routines.add.__wrapped__
        assert loaded.call_options.queue is not None and loaded.call_options.queue.name in ("api", "solo")

    @pytest.mark.parametrize("name", ["job_payload", "job_payload_variant"])
    def test_a_stored_job_payload_should_decode_to_a_task_whose_routine_loads(self, name):
        """Test a job payload as that release kept it (unsealed) is refused until the migration step seals it,
        then decodes, and the routine blob inside it loads."""
        with pytest.raises(pool.SerializationError, match="not sealed"):
            decode("old", _fixture(name), SEAL)
        sealed = reseal("old", "payload", _fixture(name), SEAL)
        assert sealed is not None
        task, policy = decode("old", sealed, SEAL)
        routine = _wire.loads(task.blob, what="fixture")
        args, kwargs = _wire.unpack_args(task.args, task.name)
        assert callable(routine.__wrapped__) and kwargs == {} and args in ((1,), (1, 2))
        if name == "job_payload":
            assert (task.queue, policy.retry_backoff, policy.retry_on) == ("api", 0.5, (ValueError, pool.WorkerBroken))


class TestThisRelease:
    def test_a_routine_with_options_should_name_only_public_paths(self):
        """Test the wire form of routines, by value and with options, names no private module, in a fresh
        process where nothing touched ``pool.Queue`` or ``pool.Routine`` first (a lazy fix-up once hid this)."""
        code = (
            "import sys; from pool._dispatch._limits import Queue; from pool._transport import _wire; "
            "from tests.fixtures.wire_2026_11 import routines; "
            "blobs = [routines.by_value(1).code()[1], "
            "_wire.dumps(routines.add.options(queue=Queue('q', concurrency=1), timeout=1.0), what='variant')]; "
            "print(*(blob.hex() for blob in blobs))"
        )
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60)
        by_value, variant = (bytes.fromhex(blob) for blob in out.stdout.split())
        assert private_names(by_value) == set()
        assert private_names(variant) == set()


class TestAliases:
    @pytest.mark.parametrize(
        ("old", "new"),
        [
            (("pool._dispatch._limits", "Queue"), ("pool", "Queue")),
            (("pool._call_options", "CallOptions"), ("pool", "CallOptions")),
            (("pool._routine", "_variant"), ("pool", "Routine._variant")),
            (("pool._gone._away", "WorkerBroken"), ("pool", "WorkerBroken")),
            (("pool._dispatch._limits", "Gate"), ("pool._dispatch._limits", "Gate")),  # not public: unchanged
            (("mymodule", "Queue"), ("mymodule", "Queue")),
        ],
    )
    def test_renamed_should_find_a_public_name_under_pool(self, old, new):
        """Test the alias rule: a public name under any private module is ``pool.X``; others keep their path."""
        assert _wire.renamed(*old) == new

    def test_a_name_under_a_module_that_no_longer_exists_should_load(self):
        """Test a pickle naming a public class under a private module that is gone (as after a move) loads."""
        data = b"\x80\x04cpool._no_such_module\nQueue\n."  # protocol 4, GLOBAL 'pool._no_such_module Queue'
        assert _wire.loads(data, what="an old name") is pool.Queue

    def test_a_name_nobody_has_should_fail_with_the_first_error(self):
        """Test that a name no alias finds still fails as before, naming the module it looked for."""
        with pytest.raises(pool.SerializationError, match=r"pool\._no_such_module"):
            _wire.loads(b"\x80\x04cpool._no_such_module\nNoSuchName\n.", what="an old name")
