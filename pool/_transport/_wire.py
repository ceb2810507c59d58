"""Values <-> bytes for the wire: the only module that imports cloudpickle.

cloudpickle pickles what plain pickle cannot (lambdas, closures, functions
of ``__main__``) by value; anything importable goes by reference, so the
worker must be able to import it too. Values try plain ``pickle`` first
(several times faster per call), whose output is the same as cloudpickle's
for anything that names no ``__main__`` object; cloudpickle takes over for
what plain pickle refuses (a lambda, a local class), for output that names
``__main__``, and whenever a module is registered to go by value. Loading
uses plain ``pickle.loads``, which reads cloudpickle's output and is faster.

Failures become `SerializationError` (a ``TypeError``) naming the value and
the reason, so the user learns which argument, result or exception could
not cross.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import pickle
import struct
import sys
import traceback
from typing import Any, Final

import cloudpickle

from .._errors import PicklingError, RemoteTraceback, SerializationError, WorkerBroken
from . import _buffers, _malloc, _side

DIGEST_BYTES: Final[int] = 16
"""Length of a routine's content digest (blake2b), its name on a stream."""

_EMPTY: Final[bytes] = b""


def dumps(value: Any, *, what: str, oob: bool = False) -> bytes:
    """Pickle ``value``; ``None`` becomes empty bytes (the common no-op case).

    With ``oob``, large buffers (`_buffers.OOB_MIN_BYTES`: numpy arrays,
    and `bytes`, `bytearray`, `memoryview` at the top level or one level
    into a tuple, list or dict) leave the pickle for a memfd region
    (`_buffers`): the result is then a `_buffers.Payload`, for a frame that
    goes through `Session.carry`. Without, everything is in the pickle.

    Raises:
        PicklingError: ``value`` cannot be pickled (a `SerializationError` and a
            ``pickle.PicklingError``); the message says what ``value`` was
            (``what``) and why.
    """
    if value is None:
        return _EMPTY
    buffers: list[memoryview] | None = [] if oob and _side.wanted() else None
    try:
        data = _plain(value, search=type(value) not in _ATOMIC, buffers=buffers) or _cloud(value, buffers)
    except Exception as exc:
        raise PicklingError(f"{what} cannot be pickled: {_describe(exc)}") from exc
    if buffers:
        return _buffers.pack(data, buffers)
    if len(data) >= _malloc.LARGE_BYTES:
        _malloc.tune()
    return data


def _cloud(value: Any, buffers: list[memoryview] | None) -> bytes:
    if buffers is None:
        return cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    buffers.clear()  # what a failed plain pickle took out
    return cloudpickle.dumps(_wrap(value), protocol=5, buffer_callback=_taker(buffers))


def _taker(buffers: list[memoryview]) -> Any:
    """A `buffer_callback` that takes large buffers out of band and leaves small ones in the pickle."""

    def take(buffer: pickle.PickleBuffer) -> bool:
        try:
            raw = buffer.raw()
        except BufferError:
            return True  # not contiguous: in band
        if raw.nbytes < _buffers.OOB_MIN_BYTES:
            return True
        buffers.append(raw)
        return False

    return take


class _Big:
    """A large `bytes`/`bytearray`/`memoryview`, pickled as an out-of-band buffer (plain pickle keeps them in band)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.data = data

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        rebuild = (
            _as_bytes if type(self.data) is bytes else _as_bytearray if type(self.data) is bytearray else _as_memoryview
        )
        return rebuild, (pickle.PickleBuffer(self.data),)


def _as_bytes(buffer: memoryview) -> bytes:
    return _malloc.to_bytes(buffer)  # a bytes object owns its memory: one copy out of the region


def _as_bytearray(buffer: memoryview) -> bytearray:
    return bytearray(buffer)


def _as_memoryview(buffer: memoryview) -> memoryview:
    return memoryview(buffer)  # over the private mapping itself: writable, no copy


_WRAP_SCAN_MAX: Final[int] = 64
"""Containers longer than this are not looked into for large bytes (the look costs per element)."""


def _big(item: Any) -> bool:
    t = type(item)
    if t is bytes or t is bytearray:
        return len(item) >= _buffers.OOB_MIN_BYTES
    return t is memoryview and item.nbytes >= _buffers.OOB_MIN_BYTES and item.c_contiguous


def _wrap(value: Any, depth: int = 2) -> Any:
    """``value`` with its large bytes-like objects (at the top, or ``depth`` levels into tuples, lists, dicts)
    marked to go out of band; ``value`` itself when there are none (no copy of a small call's arguments)."""
    if _big(value):
        return _Big(value)
    t = type(value)
    if depth == 0 or t not in _CONTAINERS or len(value) > _WRAP_SCAN_MAX:
        return value
    if t is dict:
        items = {k: _wrap(v, depth - 1) for k, v in value.items()}
        return items if any(items[k] is not v for k, v in value.items()) else value
    wrapped = [_wrap(v, depth - 1) for v in value]
    if all(w is v for w, v in zip(wrapped, value, strict=False)):
        return value
    return wrapped if t is list else tuple(wrapped)


_CONTAINERS: Final[frozenset[type]] = frozenset({tuple, list, dict})


def loads(data: bytes | memoryview, *, what: str) -> Any:
    """Unpickle ``data`` (empty bytes is ``None``; a view is a plain pickle, never a payload).

    Raises:
        SerializationError: ``data`` cannot be unpickled here (often: a
            module the sender could import and this process cannot).
        WorkerBroken: unpickling it raised a ``BaseException`` that is not an
            ``Exception`` (``SystemExit``, ``KeyboardInterrupt``): as the standard
            library's pools do, the call ends in a ``BrokenProcessPool`` (the
            original as its cause), never in the bare exception, which would end
            the program that waits for it (issue 53).
    """
    if not data:
        return None
    buffers: Any = None
    pickled: bytes | memoryview = data
    try:
        if data[0] == _buffers.MARK and type(data) is not memoryview:
            pickled, buffers = _buffers.unpack(data)
        elif len(data) >= _malloc.LARGE_BYTES:
            _malloc.tune()
        try:
            return pickle.loads(pickled, buffers=buffers)  # noqa: S301 - from a peer authenticated by mTLS or the per-user secret (docs/lan-security.md)
        except (ImportError, AttributeError) as first:
            # A name an older release wrote (a private module since moved)? Read it again through the aliases:
            # only then, so the common case keeps the C unpickler's speed. Its error stands if that fails too.
            try:
                return _Renamed(io.BytesIO(pickled), buffers=buffers).load()
            except Exception:  # noqa: BLE001 - the first error says what is wrong, not the aliases' retry
                raise first from None
    except Exception as exc:
        raise SerializationError(f"{what} cannot be unpickled: {_describe(exc)}") from exc
    except BaseException as exc:
        # A CancelledError included: a synchronous unpickler is never interrupted by a task's cancellation (that
        # arrives at an await), so one raised here came from the data, and must not pass for a cancelled task.
        raise WorkerBroken(f"{what} raised {type(exc).__name__} as it was unpickled: {exc!r}") from exc


_ALIASES: Final[dict[tuple[str, str], tuple[str, str]]] = {
    ("pool._call_options", "CallOptions"): ("pool", "CallOptions"),  # moved into pool._routine (issue 41)
    ("pool._routine", "_variant"): ("pool", "Routine._variant"),  # a routine with options, before issue 41
}
"""Names that older releases pickled, and where they live now (public names need no entry: see `renamed`)."""


def renamed(module: str, name: str) -> tuple[str, str]:
    """Where ``module.name``, as an older release pickled it, lives now.

    A public name pickled under its private module (``pool._dispatch._limits.Queue``,
    as releases before issue 41 did until ``pool.Queue`` was first touched) is
    ``pool.Queue``; other moved names are in `_ALIASES`; anything else is unchanged.
    """
    if (module, name) in _ALIASES:
        return _ALIASES[module, name]
    if module.startswith("pool._") and name in _public_names():
        return "pool", name
    return module, name


def _public_names() -> list[str]:
    names: list[str] = sys.modules["pool"].__all__  # (loaded before any of its sub-packages)
    return names


class _Renamed(pickle.Unpickler):
    """An unpickler that finds the names an older release wrote where they live now (`renamed`)."""

    def find_class(self, module: str, name: str) -> Any:
        module, name = renamed(module, name)
        if module != "pool" or "." not in name:
            return super().find_class(module, name)
        found: Any = importlib.import_module(module)
        for part in name.split("."):  # (``Routine._variant``: an attribute of a public class)
            found = getattr(found, part)
        return found


def inline(data: bytes) -> bytes:
    """``data`` with its out-of-band buffers back in the pickle, for a stream without a side connection (gRPC), or a store.

    Anything that is not such a payload is returned as it is (no cost).
    """
    if not data or data[0] != _buffers.MARK:
        return data
    value = loads(data, what="a value carried out of band")
    return dumps(value, what="a value carried out of band")


def pack_args(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Pickle a call's arguments, naming the first one that fails; large buffers go out of band (see `dumps`).

    Raises:
        SerializationError: an argument cannot be pickled; nothing was sent.
    """
    if not args and not kwargs:
        return _EMPTY
    buffers: list[memoryview] | None = [] if _side.wanted() else None
    try:
        search = not all(type(a) in _ATOMIC for a in args) or not all(type(v) in _ATOMIC for v in kwargs.values())
        data = _plain((args, kwargs), search=search, buffers=buffers) or _cloud((args, kwargs), buffers)
    except Exception:  # noqa: BLE001, S110 - the fast plain pickle failed: fall through to cloudpickle below
        pass
    else:
        if buffers:
            return _buffers.pack(data, buffers)
        if len(data) >= _malloc.LARGE_BYTES:
            _malloc.tune()
        return data
    for index, arg in enumerate(args):
        dumps(arg, what=f"argument {index} of {name}() ({_short_repr(arg)})")
    for key, arg in kwargs.items():
        dumps(arg, what=f"argument {key!r} of {name}() ({_short_repr(arg)})")
    return dumps((args, kwargs), what=f"the arguments of {name}()")


def _plain(value: Any, *, search: bool = True, buffers: list[memoryview] | None = None) -> bytes | None:
    """``value`` pickled by plain pickle where that is what cloudpickle would send; None where it is not.

    ``search=False`` for values that can name no object at all (bytes, str, numbers: `_ATOMIC`):
    their output is not searched for ``__main__``, a search that costs ~0.4 ms a MiB.
    ``buffers``: where large buffers go out of band (protocol 5); None keeps them in the pickle.
    """
    if _BY_VALUE:
        return None  # a module goes by value: whatever names it must go through cloudpickle
    try:
        if buffers is None:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        else:
            data = pickle.dumps(_wrap(value), protocol=5, buffer_callback=_taker(buffers))
    except Exception:  # noqa: BLE001 - plain pickle refused it: cloudpickle's job
        return None  # a lambda, a closure, a local class...: cloudpickle's job
    if search and _MAIN in data:
        return None  # names something of __main__, which the worker cannot import (or a string that looks so)
    return data


_ATOMIC: Final[frozenset[type]] = frozenset({bytes, bytearray, str, int, float, complex, bool, type(None)})
"""Types whose pickle names no object a worker might not have (so is never searched for ``__main__``)."""


_MAIN: Final[bytes] = b"__main__"

_BY_VALUE = getattr(getattr(cloudpickle, "cloudpickle", None), "_PICKLE_BY_VALUE_MODULES", None)
if not isinstance(_BY_VALUE, set):  # pragma: no cover - another cloudpickle layout: always cloudpickle
    _BY_VALUE = {"(unknown: cloudpickle for everything)"}


def unpack_args(data: bytes, name: str) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Inverse of `pack_args`."""
    if not data:
        return (), {}
    args, kwargs = loads(data, what=f"the arguments of {name}()")
    return args, kwargs


def by_value(module_name: str) -> bool:
    """Whether cloudpickle was told to pickle ``module_name`` by value (itself or a package above it).

    ``cloudpickle.register_pickle_by_value(mod)`` is how a user says the workers
    cannot import ``mod``; whatever comes from it must travel as code, not as a name.
    """
    registry = cloudpickle.list_registry_pickle_by_value()
    if not registry:
        return False
    parts = module_name.split(".")
    return any(".".join(parts[:end]) in registry for end in range(1, len(parts) + 1))


INTERPRETER: Final[str] = f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
"""This interpreter, as code pickled by value names it ("cpython-3.11"): its bytecode runs on this minor version only.

A function of ``__main__``, a lambda, a closure, or anything of a module
registered by value travels as code (cloudpickle), and bytecode of one
CPython minor version can crash another (3.11's segfaulted a 3.13 worker).
What carries such code is tagged with the interpreter that made it
(`interpreter_of`), and is loaded only by that interpreter (issue 54)."""

_BY_VALUE_MARK: Final[bytes] = b"cloudpickle"
"""What a pickle of code by value always names: cloudpickle's reconstructors (its functions, its skeleton classes)."""


def interpreter_of(data: bytes | memoryview) -> str:
    """`INTERPRETER` if ``data`` (a pickle this process made) carries code by value, else "" (any interpreter loads it).

    One search of the pickle's bytes, in C: a pickle made by reference only
    never names cloudpickle (it can name it inside user data, which tags it
    needlessly: a call then goes only to workers of this interpreter).
    A payload's out-of-band buffers are not searched (they hold no code).
    """
    if not data:
        return ""
    start = 0
    if data[0] == _buffers.MARK:
        try:
            start = _buffers.pickle_start(data)
        except struct.error:  # not a payload after all: all of it is searched
            start = 0
    raw = data if isinstance(data, bytes) else bytes(data)
    return INTERPRETER if raw.find(_BY_VALUE_MARK, start) >= 0 else ""


def check_interpreter(made_by: str, what: str) -> None:
    """Raise unless what ``made_by`` made may be loaded here (by reference: "", or this very interpreter).

    Raises:
        SerializationError: it carries code of another interpreter; nothing of it is loaded.
    """
    if made_by and made_by != INTERPRETER:
        raise SerializationError(
            f"{what} carries code pickled by value by {made_by}, and this process runs {INTERPRETER}: it is not "
            f"loaded (bytecode of one Python version may crash another). Run both sides on one Python version, "
            f"or make the code importable by reference on both (a module of its own, not __main__ or a closure)"
        )


def digest(blob: bytes) -> bytes:
    """The content digest a routine is cached under on each side of a stream."""
    return hashlib.blake2b(blob, digest_size=DIGEST_BYTES).digest()


def pack_exception(exc: BaseException, name: str) -> tuple[bytes, str]:
    """``(pickled exception, traceback text)`` for a RAISE outcome; never raises.

    An exception that cannot be pickled (or loaded back) is replaced by a
    `SerializationError` that says so; the traceback text still goes along.
    """
    try:
        tb = "".join(traceback.format_exception(exc))
    except Exception:  # noqa: BLE001 - a user exception whose traceback cannot be formatted still crosses
        tb = f"{type(exc).__qualname__} (its traceback could not be formatted)"
    try:
        value = cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(value)  # noqa: S301 - our own bytes, just made: an exception whose __init__ cannot take its args fails here
    except Exception as err:  # noqa: BLE001 - an unpicklable user exception crosses as a SerializationError stand-in
        stand_in = PicklingError(
            f"{name}() raised {type(exc).__qualname__}: {_safe_str(exc)}; "
            f"it cannot be sent back to the caller: {_describe(err)}"
        )
        value = cloudpickle.dumps(stand_in, protocol=pickle.HIGHEST_PROTOCOL)
    return value, tb


def unpack_exception(value: bytes, tb: str, name: str) -> BaseException:
    """The exception a RAISE outcome carries, with the remote traceback as cause."""
    try:
        exc = loads(value, what=f"the exception raised by {name}()")
    except (SerializationError, WorkerBroken) as err:
        exc = err
    if not isinstance(exc, BaseException):
        exc = SerializationError(f"{name}() raised a non-exception: {exc!r}")
    if tb:
        exc.__cause__ = RemoteTraceback(tb)
    return exc


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_safe_str(exc)}"


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - a user __str__ that raises must not hide the original error
        return f"<{type(exc).__qualname__}: str() failed>"


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a user __repr__ that raises must not hide the original error
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
