"""Tests for pool._observe._progress: the ``progress=`` argument of pool.map, and the rich bar it may ask for."""

from __future__ import annotations

import dataclasses

import pytest

from pool._observe._progress import Progress, RichBar, known_length, reporter


class TestProgress:
    def test_progress_should_be_frozen_when_a_callback_tries_to_change_it(self):
        """Test that a callback cannot change the counts the fan-out goes on from."""
        p = Progress(done=1, failed=0, in_flight=2, total=None)
        with pytest.raises(dataclasses.FrozenInstanceError):
            p.done = 5


class TestReporter:
    @pytest.mark.parametrize("progress", [None, False])
    def test_reporter_should_be_none_when_no_progress_is_asked_for(self, progress):
        """Test that None and False report nothing."""
        assert reporter(progress, "square", [1, 2]) is None

    def test_reporter_should_be_the_callers_own_when_given_a_callable(self):
        """Test that a callable is used as it is."""
        seen: list[Progress] = []
        assert reporter(seen.append, "square", [1]) == seen.append

    @pytest.mark.parametrize("progress", [1, "yes", 0.5])
    def test_reporter_should_raise_type_error_when_given_something_else(self, progress):
        """Test that a value that is neither a callable, True nor None is refused by name (1 is not True)."""
        with pytest.raises(TypeError, match="progress: expected a callable, True or None"):
            reporter(progress, "square", [1])

    def test_reporter_should_be_a_rich_bar_with_the_items_length_when_given_true(self, capsys):
        """Test that progress=True draws a bar on stderr: M/N of the items, in flight and failures."""
        bar = reporter(True, "square", list(range(10)))
        assert isinstance(bar, RichBar)
        try:
            bar(Progress(done=2, failed=1, in_flight=4, total=10))
        finally:
            bar.close()
        err = capsys.readouterr().err
        assert "square" in err and "3/10" in err and "4 in flight, 1 failed" in err


class TestLength:
    def test_length_should_be_the_length_when_the_items_have_one_and_none_otherwise(self):
        """Test that a sized input gives the bar a total, and an iterator leaves it open."""
        assert known_length([1, 2, 3]) == 3
        assert known_length(range(7)) == 7
        assert known_length(iter([1, 2])) is None
        assert known_length(x for x in ()) is None
