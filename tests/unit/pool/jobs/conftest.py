"""The jobs' one random generator (``pool._base._random``) is registered with hypothesis (STYLE.md), so a
failing example replays with the same jitter."""

from hypothesis import register_random

from pool._base._random import RANDOM

register_random(RANDOM)
