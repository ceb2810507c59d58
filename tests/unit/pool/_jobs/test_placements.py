"""The scheduler's placement window (`pool._jobs._placements`): a slow start, and waiting for capacity (no I/O)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pool._jobs._placements import MAX_PLACING, PlacementWindow


@given(st.lists(st.sampled_from(["accepted", "refused_now", "refused_stale", "capacity", "probe", "shrink"])))
def test_the_window_should_stay_between_one_and_the_cap_and_wait_only_after_a_current_refusal(events):
    """Test the invariants over any events: 1 <= size <= MAX_PLACING; no placement while a refusal stands."""
    window = PlacementWindow()
    for event in events:
        if event == "accepted":
            before = window.size
            assert window.accepted() == (before < MAX_PLACING) and window.size == min(MAX_PLACING, before * 2)
        elif event == "refused_now":
            assert window.refused(window.epoch) is False and window.no_worker and window.size == 1
        elif event == "refused_stale":
            assert window.refused(window.epoch - 1) is True and window.size == 1  # capacity freed meanwhile
        elif event == "capacity":
            window.capacity_changed()
            assert not window.no_worker
        else:
            getattr(window, event)()
        assert 1 <= window.size <= MAX_PLACING
        assert window.allows(0) == (not window.no_worker)


def test_the_window_should_double_after_a_refusal_until_the_cap():
    """Test the slow start: one placement after a refusal, then 2, 4, ... as workers accept."""
    window = PlacementWindow()
    assert window.allows(MAX_PLACING - 1) and not window.allows(MAX_PLACING)
    assert window.refused(window.epoch) is False and not window.allows(0)  # wait for capacity
    window.capacity_changed()
    assert window.allows(0) and not window.allows(1)
    sizes = []
    while window.accepted():
        sizes.append(window.size)
    assert sizes[:3] == [2, 4, 8] and sizes[-1] == MAX_PLACING and not window.accepted()
    assert repr(window) == f"<PlacementWindow size={MAX_PLACING} epoch=1 no_worker=False>"
