"""Tests for pool._worker._hosted: a hosted call's starting state and a routine unpickled once, where it runs."""

from __future__ import annotations

import functools

import pytest

from pool._call._task import CallRecord
from pool._errors import SerializationError
from pool._transport import _wire
from pool._transport._proto import leakypool_pb2 as pb
from pool._worker._hosted import CANCELLED, STOP, Code, Hosted

UNPICKLED: list[str] = []


def double(x: int) -> int:
    return 2 * x


class Counted:
    """Pickles by value, and counts each unpickling (in UNPICKLED)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self):
        return (_counted, (self.name,))

    def __call__(self) -> str:
        return self.name


def _counted(name: str) -> Counted:
    UNPICKLED.append(name)
    return Counted(name)


@functools.wraps(double)
def routine_wrapper(*args, **kwargs):  # what a routine decorator leaves: the function under __wrapped__
    raise AssertionError("the worker must call the function itself, not the dispatching wrapper")


def task(*, generator: bool = False) -> CallRecord:
    return CallRecord(name="f", generator=generator, digest=b"d", blob=b"", args=b"")


class TestCode:
    def test_resolve_should_unpickle_once_and_keep_the_function(self):
        """Test that a routine sent once is unpickled at its first call only (the blob is cached by the worker)."""
        UNPICKLED.clear()
        code = Code(_wire.dumps(Counted("c"), what="routine"), "c")
        assert code.fn is None  # nothing unpickled on arrival
        first = code.resolve()
        assert code.resolve() is first
        assert UNPICKLED == ["c"]
        assert first() == "c"

    def test_resolve_should_unwrap_a_routine_to_the_function_it_wraps(self):
        """Test that the worker runs the undecorated function (calling the wrapper would dispatch again)."""
        code = Code(_wire.dumps(routine_wrapper, what="routine"), "double")
        assert code.resolve() is double

    def test_resolve_should_raise_serialization_error_naming_the_routine_when_the_blob_is_bad(self):
        """Test that a blob that does not unpickle fails naming the routine, and is tried again next time."""
        code = Code(b"not a pickle", "broken")
        with pytest.raises(SerializationError, match="broken"):
            code.resolve()
        assert code.fn is None


class TestHosted:
    def test_init_should_give_a_generator_a_queue_of_steps_and_a_coroutine_none(self):
        """Test that only a generator call gets a queue for its Steps."""
        code = Code(b"", "f")
        assert Hosted(None, 2, task(), code).steps is None  # type: ignore[arg-type]
        steps = Hosted(None, 4, task(generator=True), code).steps  # type: ignore[arg-type]
        assert steps is not None and steps.empty()

    def test_init_should_start_unqueued_unsettled_and_without_a_deadline(self):
        """Test the starting state the service and the plain line rely on."""
        hosted = Hosted("session", 6, task(), Code(b"", "f"))  # type: ignore[arg-type]
        assert (hosted.session, hosted.id) == ("session", 6)
        assert not (hosted.cancelled or hosted.queued or hosted.landing or hosted.pending)
        assert not (hosted.counted or hosted.settled)
        assert (hosted.deadline, hosted.timer, hosted.runner, hosted.nested) == (None, None, None, 0)


def test_outcomes_should_be_empty_of_a_given_kind():
    """Test the two fixed outcomes the service answers with."""
    assert CANCELLED == (pb.Outcome.CANCELLED, b"", "")
    assert STOP == (pb.Outcome.STOP, b"", "")
