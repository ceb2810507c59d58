"""Names a package exports but loads on first use: `lazy_attribute`, a package's ``__getattr__``.

A package's ``__init__`` is the wall its siblings import through, but some
of what it offers is heavy (gRPC, zeroconf, prometheus-client) or belongs to
one process only (a worker never opens a connection to a worker). Those
names are listed in the package's ``LAZY`` table and imported for type
checkers under ``TYPE_CHECKING``; the module behind one loads the first time
the name is read (PEP 562), as CPython's ``concurrent.futures`` loads its
process pool. tests/unit/test_layout.py checks that the table and the
type-checking imports agree.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, MutableMapping


def lazy_attribute(package: str, table: Mapping[str, str], namespace: MutableMapping[str, object], name: str) -> object:
    """``name`` from the module ``table`` gives for it (relative to ``package``), kept in ``namespace`` for next time.

    Raises:
        AttributeError: ``name`` is not in ``table``.
    """
    where = table.get(name)
    if where is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, package), name)
    namespace[name] = value
    return value
