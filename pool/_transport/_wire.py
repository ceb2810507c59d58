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
import pickle
import traceback
from typing import Any, Final

import cloudpickle

from .._errors import RemoteTraceback, SerializationError
from . import _malloc

DIGEST_BYTES: Final[int] = 16
"""Length of a routine's content digest (blake2b), its name on a stream."""

_EMPTY: Final[bytes] = b""


def dumps(value: Any, *, what: str) -> bytes:
    """Pickle ``value``; ``None`` becomes empty bytes (the common no-op case).

    Raises:
        SerializationError: ``value`` cannot be pickled; the message says
            what ``value`` was (``what``) and why.
    """
    if value is None:
        return _EMPTY
    try:
        data = _plain(value, search=type(value) not in _ATOMIC) or cloudpickle.dumps(
            value, protocol=pickle.HIGHEST_PROTOCOL
        )
    except Exception as exc:
        raise SerializationError(f"{what} cannot be pickled: {_describe(exc)}") from exc
    if len(data) >= _malloc.LARGE_BYTES:
        _malloc.tune()
    return data


def loads(data: bytes, *, what: str) -> Any:
    """Unpickle ``data`` (empty bytes is ``None``).

    Raises:
        SerializationError: ``data`` cannot be unpickled here (often: a
            module the sender could import and this process cannot).
    """
    if not data:
        return None
    if len(data) >= _malloc.LARGE_BYTES:
        _malloc.tune()
    try:
        return pickle.loads(data)
    except Exception as exc:
        raise SerializationError(f"{what} cannot be unpickled: {_describe(exc)}") from exc


def pack_args(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bytes:
    """Pickle a call's arguments, naming the first one that fails.

    Raises:
        SerializationError: an argument cannot be pickled; nothing was sent.
    """
    if not args and not kwargs:
        return _EMPTY
    try:
        search = not all(type(a) in _ATOMIC for a in args) or not all(type(v) in _ATOMIC for v in kwargs.values())
        data = _plain((args, kwargs), search=search) or cloudpickle.dumps(
            (args, kwargs), protocol=pickle.HIGHEST_PROTOCOL
        )
    except Exception:
        pass
    else:
        if len(data) >= _malloc.LARGE_BYTES:
            _malloc.tune()
        return data
    for index, arg in enumerate(args):
        dumps(arg, what=f"argument {index} of {name}() ({_short_repr(arg)})")
    for key, arg in kwargs.items():
        dumps(arg, what=f"argument {key!r} of {name}() ({_short_repr(arg)})")
    return dumps((args, kwargs), what=f"the arguments of {name}()")


def _plain(value: Any, *, search: bool = True) -> bytes | None:
    """``value`` pickled by plain pickle where that is what cloudpickle would send; None where it is not.

    ``search=False`` for values that can name no object at all (bytes, str, numbers: `_ATOMIC`):
    their output is not searched for ``__main__``, a search that costs ~0.4 ms a MiB.
    """
    if _BY_VALUE:
        return None  # a module goes by value: whatever names it must go through cloudpickle
    try:
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
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
    except Exception:
        tb = f"{type(exc).__qualname__} (its traceback could not be formatted)"
    try:
        value = cloudpickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(value)  # an exception whose __init__ cannot take its args fails here
    except Exception as err:
        stand_in = SerializationError(
            f"{name}() raised {type(exc).__qualname__}: {_safe_str(exc)}; "
            f"it cannot be sent back to the caller: {_describe(err)}"
        )
        value = cloudpickle.dumps(stand_in, protocol=pickle.HIGHEST_PROTOCOL)
    return value, tb


def unpack_exception(value: bytes, tb: str, name: str) -> BaseException:
    """The exception a RAISE outcome carries, with the remote traceback as cause."""
    try:
        exc = loads(value, what=f"the exception raised by {name}()")
    except SerializationError as err:
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
    except Exception:
        return f"<{type(exc).__qualname__}: str() failed>"


def _short_repr(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
