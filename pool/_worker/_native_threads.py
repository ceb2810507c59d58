"""Native thread pools (BLAS, OpenMP) capped in a worker, as joblib's loky backend caps them (issue 53).

Two workers on two cores, each running a BLAS that starts a thread per core,
run four threads on two cores: every product waits for the others. loky
gives each worker ``cpu_count() // n_jobs`` threads; a pool gives its
spawned workers the same (``max_threads_per_worker``, default CPUs //
workers) as ``--max-threads`` / ``LEAKYPOOL_MAX_THREADS``. A worker then:

- sets ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and the other variables
  the libraries read as they load, each only where it is not set already
  (the user's environment wins), before any user code runs;
- and, if such a library is loaded already (a worker forked from a template
  that imported numpy), limits its pool at run time with threadpoolctl, for
  each library whose variable the user did not set.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Final

_log = logging.getLogger("leakypool.worker")

VARIABLES: Final[dict[str, str]] = {
    "OMP_NUM_THREADS": "openmp",
    "OPENBLAS_NUM_THREADS": "openblas",
    "MKL_NUM_THREADS": "mkl",
    "BLIS_NUM_THREADS": "blis",
    "VECLIB_MAXIMUM_THREADS": "",  # (macOS's Accelerate)
    "NUMEXPR_NUM_THREADS": "",
}
"""The variables native thread pools read at load -> threadpoolctl's name of the library ("": none it limits)."""

_LOADERS: Final[tuple[str, ...]] = ("numpy", "scipy", "torch", "sklearn", "numexpr")
"""Modules that load a native thread pool when imported: one of these already here means a library to limit."""


def cap_native_threads(threads: int) -> None:
    """Cap native thread pools at ``threads`` (0: leave them alone); a variable the user set wins for its library."""
    if threads <= 0:
        return
    chosen = {name for name in VARIABLES if name in os.environ}
    for name in VARIABLES:
        os.environ.setdefault(name, str(threads))
    if not any(module in sys.modules for module in _LOADERS):
        return  # nothing loaded yet: the variables are read as the libraries load
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # (a default dependency; absent only where someone removed it)
        _log.warning("a native library is loaded and threadpoolctl is missing: its threads are not capped")
        return
    apis = sorted({api for name, api in VARIABLES.items() if api and name not in chosen})
    if apis:
        # For the worker's life: the limits object restores the old sizes only if asked to.
        ThreadpoolController().select(internal_api=apis).limit(limits=threads)
