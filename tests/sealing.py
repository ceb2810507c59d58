"""A seal for tests that build job stores, schedulers and job books by hand (the pool makes its own)."""

from __future__ import annotations

from pool._transport._seal import Seal

SECRET = "a-test-secret"
"""The secret every hand-built scheduler and job book of the tests holds (so they read each other's rows)."""

SEAL = Seal(lambda: (SECRET,), "the tests' secret")
"""Seals and opens what hand-built schedulers and job books write."""
