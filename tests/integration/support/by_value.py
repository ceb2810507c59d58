"""A module the workers cannot import, registered with cloudpickle to travel by value (test_by_value uses it).

`load` writes it to a directory that is not on any import path, imports it
from there and registers it; `check` calls its routines through a pool and
reports what came back, so the same checks run in every template mode, from
the test process and from a single-threaded script (the forked template).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle

NAME = "leakypool_by_value_probe"

SOURCE = textwrap.dedent('''
    import importlib.util
    import os

    import pool


    class ProbeError(Exception):
        """Raised by `fails`; the caller must catch it by this very class."""


    @pool.routine
    async def where():
        return os.getpid(), importlib.util.find_spec(__name__) is not None


    @pool.routine
    async def fails(text):
        raise ProbeError(text)


    @pool.routine
    async def fails_nested(text):
        return await fails(text)
''')


def load(directory: Path) -> ModuleType:
    """The probe module, imported from ``directory`` (not on sys.path) and registered by value."""
    if NAME in sys.modules:
        return sys.modules[NAME]
    path = directory / f"{NAME}.py"
    path.write_text(SOURCE)
    spec = importlib.util.spec_from_file_location(NAME, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[NAME] = module
    spec.loader.exec_module(module)
    cloudpickle.register_pickle_by_value(module)
    return module


async def check(module: Any) -> dict[str, object]:
    """Call the probe's routines through the current pool; what happened, as plain values."""
    seen: dict[str, object] = {}
    pid, importable = await module.where()
    seen["ran_elsewhere"] = pid != os.getpid()
    seen["worker_could_import_it"] = importable
    for routine in (module.fails, module.fails_nested):
        try:
            await routine("boom")
        except module.ProbeError as exc:
            seen[routine.__name__] = f"caught {type(exc).__name__}: {exc}"
        except BaseException as exc:  # noqa: BLE001 - the defect: another class of the same name, or no code at all
            seen[routine.__name__] = f"missed {type(exc).__module__}.{type(exc).__qualname__}: {exc}"
    return seen


EXPECTED = {
    "ran_elsewhere": True,
    "fails": "caught ProbeError: boom",
    "fails_nested": "caught ProbeError: boom",
}
"""What `check` must report in every mode (apart from ``worker_could_import_it``)."""
