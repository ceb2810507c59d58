"""Tests for pool._base._ids: worker uids are UUIDv7, ordered by creation time."""

from __future__ import annotations

import itertools
import time
import uuid

from pool._base._ids import new_uid


def unix_ms(uid: uuid.UUID) -> int:
    """The creation time a UUIDv7 carries in its top 48 bits (RFC 9562)."""
    return uid.int >> 80


class TestNewUid:
    def test_new_uid_should_be_a_version_7_uuid_of_the_rfc_variant(self):
        """Test the version and variant bits, which other UUID tools read."""
        uid = new_uid()
        assert uid.version == 7
        assert uid.variant == uuid.RFC_4122

    def test_new_uid_should_carry_the_current_unix_time_in_milliseconds(self):
        """Test that the top 48 bits are the time the uid was made."""
        before = time.time_ns() // 1_000_000
        uid = new_uid()
        after = time.time_ns() // 1_000_000
        assert before <= unix_ms(uid) <= after

    def test_new_uid_should_grow_with_creation_time(self):
        """Test that uids made in sequence never go back in time, and one made in a later millisecond is larger
        (what PriorityLoadBalancer's lowest-uid-first relies on)."""
        uids = [new_uid() for _ in range(2000)]
        times = [unix_ms(u) for u in uids]
        assert times == sorted(times)
        for earlier, later in itertools.pairwise(uids):
            if unix_ms(earlier) < unix_ms(later):
                assert earlier < later

    def test_new_uid_should_be_unique_within_one_millisecond(self):
        """Test that the 74 random bits make uids made together distinct."""
        uids = [new_uid() for _ in range(2000)]
        assert len(set(uids)) == len(uids)
        assert len({u.int & ((1 << 62) - 1) for u in uids}) == len(uids)
