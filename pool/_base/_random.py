"""The one random generator of the dispatching side (as trio keeps one in ``_core/_run.py``).

Jitter only (job retries, store back-off, purge timing): nothing here needs
to be unpredictable, and one generator lets a test seed or register it
(``hypothesis.register_random``) in one place.
"""

from __future__ import annotations

import random
from typing import Final

RANDOM: Final[random.Random] = random.Random()
"""Shared by every module that draws a random number; never make another ``random.Random()``."""
