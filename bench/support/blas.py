"""The BLAS-heavy work of bench_blas (importable by workers): matrix products of 500 x 500."""

from __future__ import annotations

SIZE = 500
"""Rows and columns of each matrix."""


def product(seed: int) -> float:
    """The norm of the product of two random SIZE x SIZE matrices (one BLAS dgemm of ~0.25 GFLOP)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = rng.random((SIZE, SIZE)), rng.random((SIZE, SIZE))
    return float(np.linalg.norm(a @ b))
