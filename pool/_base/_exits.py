"""A worker's exit statuses, as its pool reads them."""

from __future__ import annotations

from typing import Final

EXIT_RETIRED: Final[int] = 75
"""The worker left on purpose (a plain call past its hard timeout, a recycle): replace it, with no crash back-off."""
