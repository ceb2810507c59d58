"""Slots of a cron schedule (I/O-free): the latest at or before a time, the next after it, missed counts, zones."""

from __future__ import annotations

import datetime
import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import pool
from pool._call._task import CallRecord
from pool._jobs._periodic import LATE_SLOT_MAX_S, Periodic, Slots, schedule_name

T0 = datetime.datetime(2027, 3, 1, 12, 0, 0, tzinfo=datetime.UTC).timestamp()


@given(offset=st.floats(0, 7 * 86400, allow_nan=False))
@example(offset=5e-7)  # half a microsecond past a slot: latest() gave the slot before
def test_latest_and_next_should_bracket_any_time(offset):
    """Test the invariant: latest(t) <= t < next_after(t), and nothing of the schedule lies between them."""
    slots = Slots("*/15 * * * *")
    when = T0 + offset
    latest, following = slots.latest(when), slots.next_after(when)
    assert latest <= when < following and following - latest <= 15 * 60 and latest % (15 * 60) == 0
    assert slots.next_after(latest) == following or slots.next_after(latest) == latest + 15 * 60


def test_a_slot_exactly_now_should_be_the_latest_and_the_count_should_say_how_many_were_missed():
    slots = Slots("0 * * * *")
    assert slots.latest(T0) == T0 and slots.next_after(T0) == T0 + 3600
    assert slots.count_between(T0 - 3 * 3600, T0) == 3


def test_seconds_and_zones_should_be_honoured():
    assert Slots("* * * * * */10").next_after(T0 + 1) == T0 + 10
    paris = Slots("0 7 * * *", "Europe/Paris")  # 07:00 in Paris is 06:00 UTC in March (CET)
    assert datetime.datetime.fromtimestamp(paris.next_after(T0), datetime.UTC).hour == 6


@pytest.mark.parametrize(
    ("cron", "tz", "message"),
    [
        ("every day", "UTC", "cron: expected 'minute hour day month weekday'"),
        ("0 25 * * *", "UTC", "cron: expected"),
        ("0 7 * * *", "Nowhere/Atlantis", "tz: expected an IANA time zone name"),
    ],
)
def test_a_bad_expression_or_zone_should_fail_in_one_line(cron, tz, message):
    with pytest.raises(pool.ConfigError, match=message) as info:
        Slots(cron, tz)
    assert "\n" not in str(info.value)


def test_the_name_should_depend_on_routine_expression_zone_and_arguments_only():
    task = CallRecord("app.digest", False, b"d", b"blob", b"args")
    same = CallRecord("app.digest", False, b"d", b"other blob", b"args", timeout=3.0)
    assert schedule_name(task, "0 7 * * *", "UTC") == schedule_name(same, "0 7 * * *", "UTC")
    assert (
        len(
            {
                schedule_name(task, "0 7 * * *", "UTC"),
                schedule_name(task, "0 8 * * *", "UTC"),
                schedule_name(task, "0 7 * * *", "Europe/Paris"),
                schedule_name(CallRecord("app.digest", False, b"d", b"", b"x"), "0 7 * * *", "UTC"),
            }
        )
        == 4
    )


def test_the_next_slot_should_follow_on_time_and_skipped_slots_should_be_counted():
    """Test `Slots.following`: the next slot when on time; past LATE_SLOT_MAX_S late, skipped and counted."""
    slots = Slots("* * * * * */1")
    assert slots.following(T0, T0 + 0.5) == (T0 + 1, 0)
    assert slots.following(T0, T0 + 1 + LATE_SLOT_MAX_S) == (T0 + 1, 0)  # late, within the bound: still claimed
    assert slots.following(T0, T0 + 5.5) == (T0 + 5, 4)  # 1, 2, 3, 4 skipped; 5 is 0.5 s late


def test_a_skipped_slot_should_be_logged(caplog):
    """Test that a process that stalled says which slots it left, instead of skipping them silently."""
    task = CallRecord("app.tick", False, b"d", b"blob", b"args")
    periodic = Periodic.__new__(Periodic)
    periodic.name, periodic.slots = schedule_name(task, "* * * * * */1", "UTC"), Slots("* * * * * */1")
    caplog.set_level("WARNING", logger="leakypool.jobs")
    now = time.time()
    assert periodic._following(now - 10) > now - LATE_SLOT_MAX_S - 1
    (record,) = caplog.records
    assert "stalled; skipped" in record.getMessage() and periodic.name in record.getMessage()
