"""Turn ``WorkerPool(store=...)`` into a store: a URL names a backend, an object is used as it is."""

from __future__ import annotations

from ..._base import redacted
from ..._config import PoolConfig
from ..._errors import ConfigError
from .._store import JobStore
from ._retry import retrying


def open_store(store: object) -> JobStore | None:
    """The store ``store`` names: None/"" for none, a URL, or a `JobStore` object.

    Raises:
        ConfigError: an unknown scheme, or an object that is not a JobStore.
    """
    if store is None or store == "":
        return None
    if isinstance(store, str):
        if store.startswith("sqlite:///"):
            from ._sqlite import SQLiteStore

            return SQLiteStore.from_url(store)
        if store.startswith(("postgresql://", "postgres://")):
            from ._postgres import PostgresStore

            return PostgresStore.from_url(store)
        raise ConfigError(f"store: expected sqlite:///PATH or postgresql://..., got {redacted(store)!r}")
    if isinstance(store, JobStore):
        return store
    raise ConfigError(f"store: expected a store URL or a pool.JobStore, got {store!r}")


async def open_waiting(store: JobStore) -> None:
    """``store.open()``, waiting for a server out of reach up to ``LEAKYPOOL_STORE_RETRY`` (a log line per back-off).

    For the ``leakypool jobs`` command: run during a database restart, it
    waits it out as a pool does (`RetryingStore.open`).

    Raises:
        ConfigError: the store cannot work, or a bad ``LEAKYPOOL_STORE_RETRY``.
        StoreError: still out of reach after ``store_retry`` seconds.
    """
    budget = PoolConfig.from_env().store_retry
    await retrying("opening the store", budget, store.open, repr(store), log_each=True)
