"""Tests for pool._transport._wire: values, arguments and exceptions across the wire."""

from __future__ import annotations

import copyreg
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pool
from pool._transport import _side, _wire

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children) | st.tuples(children, children),
    max_leaves=20,
)


class TestDumpsLoads:
    @given(values)
    def test_loads_should_return_an_equal_value_when_given_dumps_output(self, value):
        """Test that any plain value survives the round trip."""
        assert _wire.loads(_wire.dumps(value, what="v"), what="v") == value

    def test_dumps_should_encode_none_as_empty_bytes(self):
        """Test that the common None result costs nothing on the wire."""
        assert _wire.dumps(None, what="v") == b""
        assert _wire.loads(b"", what="v") is None

    def test_dumps_should_pickle_lambdas_by_value(self):
        """Test that cloudpickle handles what plain pickle cannot."""
        fn = _wire.loads(_wire.dumps(lambda x: x + 1, what="fn"), what="fn")
        assert fn(1) == 2

    @given(values)
    def test_dumps_should_send_plain_values_as_plain_pickle_does(self, value):
        """Test the fast path: what needs nothing of cloudpickle leaves as plain pickle's bytes."""
        import pickle

        if value is not None:
            assert _wire.dumps(value, what="v") == pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)

    def test_dumps_should_leave_to_cloudpickle_what_names_main_or_a_by_value_module(self, monkeypatch):
        """Test the fallback: output naming __main__, and anything while a module goes by value, is cloudpickle's."""
        import pickle
        import sys
        import types

        main = types.ModuleType("__main__")
        exec("class Point:\n    def __init__(self, x):\n        self.x = x\n", main.__dict__)  # noqa: S102
        main.Point.__module__ = "__main__"
        monkeypatch.setitem(sys.modules, "__main__", main)
        data = _wire.dumps(main.Point(3), what="v")
        assert b"Point" in data and data != pickle.dumps(main.Point(3), protocol=pickle.HIGHEST_PROTOCOL)
        monkeypatch.setitem(
            sys.modules, "__main__", sys.modules[__name__]
        )  # gone from here: loads needs the class by value
        assert _wire.loads(data, what="v").x == 3
        monkeypatch.setattr(_wire, "_BY_VALUE", {"some.module"})
        assert _wire._plain((1, 2)) is None

    def test_dumps_should_not_search_values_that_can_name_no_object(self, monkeypatch):
        """Test that bytes and the like go as plain pickle unsearched (the search costs ~0.4 ms a MiB).

        A bytes value that merely contains the text ``__main__`` still goes plain; inside a list,
        where an object could hide, the same bytes send the value through the search (then cloudpickle).
        """
        import pickle

        monkeypatch.setattr(_wire, "_BY_VALUE", set())  # as if no module went by value (other tests register some)
        text = b"x __main__ y" * 10_000
        assert _wire.dumps(text, what="v") == pickle.dumps(text, protocol=pickle.HIGHEST_PROTOCOL)
        assert _wire.pack_args("f", (text,), {"k": 3}) == pickle.dumps(((text,), {"k": 3}), protocol=5)
        assert _wire._plain([text]) is None
        assert _wire.loads(_wire.pack_args("f", ([text],), {}), what="v") == (([text],), {})

    def test_dumps_should_raise_serialization_error_naming_the_value_when_unpicklable(self):
        """Test that the error says what could not be pickled, and is a TypeError."""
        with pytest.raises(pool.SerializationError, match=r"^the result of f\(\) cannot be pickled: TypeError"):
            _wire.dumps(threading.Lock(), what="the result of f()")
        assert issubclass(pool.SerializationError, TypeError)

    def test_loads_should_raise_serialization_error_when_given_garbage(self):
        """Test that undecodable bytes are a named error, not a crash."""
        with pytest.raises(pool.SerializationError, match="cannot be unpickled"):
            _wire.loads(b"\x80\x05garbage", what="x")


class TestPackArgs:
    @given(
        st.lists(values, max_size=4).map(tuple),
        st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), values, max_size=3),
    )
    def test_unpack_args_should_invert_pack_args(self, args, kwargs):
        """Test that arguments survive the round trip."""
        assert _wire.unpack_args(_wire.pack_args("f", args, kwargs), "f") == (args, kwargs)

    def test_pack_args_should_be_empty_when_there_are_no_arguments(self):
        """Test the no-argument fast path."""
        assert _wire.pack_args("f", (), {}) == b""
        assert _wire.unpack_args(b"", "f") == ((), {})

    def test_pack_args_should_name_the_positional_argument_that_fails(self):
        """Test that the error points at the culprit by position."""
        with pytest.raises(pool.SerializationError, match=r"argument 1 of f\(\) \(<unlocked _thread.lock"):
            _wire.pack_args("f", (1, threading.Lock()), {})

    def test_pack_args_should_name_the_keyword_argument_that_fails(self):
        """Test that the error points at the culprit by name."""
        with pytest.raises(pool.SerializationError, match=r"argument 'lock' of f\(\)"):
            _wire.pack_args("f", (1,), {"lock": threading.Lock()})


class Holder(Exception):
    def __init__(self):
        super().__init__("holds a lock")
        self.lock = threading.Lock()


class TwoArgs(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")  # args do not match __init__: unpickling fails


class Hostile(Exception):
    """Cannot be pickled, and even str() fails."""

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()

    def __str__(self):
        raise RuntimeError("no str for you")


class TestPackException:
    def test_pack_exception_should_not_raise_even_for_a_hostile_exception(self):
        """Test that a routine's worst exception still becomes an outcome (or its caller would hang)."""
        value, tb = _wire.pack_exception(Hostile(), "f")
        restored = _wire.unpack_exception(value, tb, "f")
        assert isinstance(restored, pool.SerializationError) and "str() failed" in str(restored)

    def test_unpack_exception_should_keep_type_message_and_remote_traceback(self):
        """Test that a routine's exception arrives as itself, with the worker traceback as cause."""
        try:
            raise KeyError("missing")
        except KeyError as exc:
            value, tb = _wire.pack_exception(exc, "f")
        restored = _wire.unpack_exception(value, tb, "f")
        assert type(restored) is KeyError and restored.args == ("missing",)
        assert isinstance(restored.__cause__, pool.RemoteTraceback)
        assert 'raise KeyError("missing")' in restored.__cause__.tb

    @pytest.mark.parametrize("exc", [Holder(), TwoArgs(1, 2)], ids=["unpicklable", "unloadable"])
    def test_pack_exception_should_substitute_a_serialization_error_when_the_exception_cannot_cross(
        self, exc, monkeypatch
    ):
        """Test that an exception that cannot cross becomes a clear SerializationError.

        Importing wool (the embed test) installs tblib's reducers for every exception class defined
        by then, which makes TwoArgs loadable; pytest collects this module first in some orders.
        """
        monkeypatch.delitem(copyreg.dispatch_table, type(exc), raising=False)
        value, tb = _wire.pack_exception(exc, "f")
        restored = _wire.unpack_exception(value, tb, "f")
        assert isinstance(restored, pool.SerializationError)
        assert f"f() raised {type(exc).__qualname__}" in str(restored)
        assert "cannot be sent back to the caller" in str(restored)

    def test_unpack_exception_should_report_undecodable_bytes_as_serialization_error(self):
        """Test that a caller that cannot load the exception still gets the traceback."""
        restored = _wire.unpack_exception(b"\x80\x05garbage", "Traceback: remote", "f")
        assert isinstance(restored, pool.SerializationError)
        assert restored.__cause__.tb == "Traceback: remote"


class TestOutOfBand:
    """Large buffers leave the pickle for a memfd region (issue 34), in one process (its own region)."""

    @pytest.fixture(autouse=True)
    def _local_peers(self, monkeypatch):
        monkeypatch.setattr(_side, "_expected", True)  # as in a process that reaches workers over unix sockets

    def test_dumps_should_carry_a_large_array_out_of_band_and_load_it_writable_with_value_semantics(self):
        np = pytest.importorskip("numpy")
        array = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
        payload = _wire.dumps(array, what="x", oob=True)
        assert len(payload) < 4096  # the pickle only; the buffer is in the region
        back = _wire.loads(payload, what="x")
        assert np.array_equal(back, array) and back.flags.writeable
        back[0] = -1.0
        assert array[0] == 0.0 and _wire.loads(payload, what="x")[0] == 0.0  # copy-on-write: nothing else changed

    def test_dumps_should_bring_large_bytes_back_as_bytes(self):
        data = bytes(range(256)) * 4096  # 1 MiB
        payload = _wire.pack_args("f", (data,), {"k": bytearray(data)})
        assert len(payload) < 4096
        (back,), kwargs = _wire.unpack_args(payload, "f")
        assert type(back) is bytes and back == data
        assert type(kwargs["k"]) is bytearray and kwargs["k"] == data

    def test_a_process_without_unix_peers_should_keep_every_buffer_in_the_pickle(self, monkeypatch):
        monkeypatch.setattr(_side, "_expected", False)
        assert _wire.dumps(b"y" * (1 << 20), what="x", oob=True)[:1] == b"\x80"  # nothing to carry it out of band

    def test_small_values_should_keep_the_plain_pickle(self):
        assert _wire.dumps(b"x" * 100, what="x", oob=True)[:1] == b"\x80"
        assert _wire.pack_args("f", (1, "a"), {})[:1] == b"\x80"

    def test_inline_should_put_the_buffers_back_in_the_pickle(self):
        data = b"y" * (1 << 20)
        inline = _wire.inline(_wire.dumps(data, what="x", oob=True))
        assert inline[:1] == b"\x80" and _wire.loads(inline, what="x") == data
