"""Whether a store error means the store was out of reach (try again) or refused (do not): both sides use it.

The dispatching side's stores retry within ``store_retry`` (`pool._jobs._stores._retry`);
a worker's ``--registry`` waits at start the same way (`pool._worker._registry`).
"""

from __future__ import annotations

from typing import Final

_LOST_TYPES: Final[frozenset[str]] = frozenset(
    {
        # asyncpg: the connection broke, or was handed out after it broke (its state error, issue #25)
        "InternalClientError",
        "ConnectionDoesNotExistError",
        "ConnectionFailureError",
        # PostgreSQL classes 08 (connection exception) and 57 (operator intervention: shutdown, restart)
        "PostgresConnectionError",
        "OperatorInterventionError",
        "TooManyConnectionsError",
    }
)
"""Names of asyncpg error classes (or their bases) that mean the connection, not the statement, failed."""


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` (a `StoreError`, or the driver's own error) means the store was out of reach.

    Then trying again may succeed (on a new connection). Looks at ``exc``
    and its chain of causes: the network's errors, asyncpg's
    connection-level errors, and SQLite's busy or locked database.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, OSError | TimeoutError):
            return True
        names = {cls.__name__ for cls in type(seen).__mro__}
        if type(seen).__module__.startswith("asyncpg") and (
            names & _LOST_TYPES or ("InterfaceError" in names and "DataError" not in names and "closed" in str(seen))
        ):
            return True  # (an InterfaceError otherwise is a misuse, e.g. a bad argument: no retry can fix it)
        if type(seen).__module__ == "sqlite3" and any(word in str(seen) for word in ("locked", "busy")):
            return True
        seen = seen.__cause__
    return False
