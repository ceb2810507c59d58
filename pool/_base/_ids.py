"""Worker uids: time-ordered UUIDs (the layout of RFC 9562 UUIDv7)."""

from __future__ import annotations

import os
import time
import uuid

_MS_BITS = 48


def new_uid() -> uuid.UUID:
    """A fresh uid whose integer value grows with creation time.

    The top 48 bits are the Unix time in milliseconds, the rest random
    (with the version and variant bits of UUIDv7). Under
    `balancer.PriorityLoadBalancer`, which prefers the lowest uid, the
    oldest worker therefore takes work first and the newest drain first.
    """
    ms = time.time_ns() // 1_000_000 & ((1 << _MS_BITS) - 1)
    rand = int.from_bytes(os.urandom(10), "big")
    value = ms << 80 | 0x7 << 76 | (rand >> 62 & 0xFFF) << 64 | 0b10 << 62 | rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)
