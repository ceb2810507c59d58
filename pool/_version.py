"""The leakypool version: one place, read by the package, workers and their State answers."""

from __future__ import annotations

from typing import Final

__version__: Final[str] = "0.1.0"
