"""Discovery: how a pool learns about workers it did not spawn.

A backend is anything with ``subscribe()`` (the protocol: ``_protocol``), an async iterator of
`DiscoveryEvent` (worker added, updated, dropped). A subscriber MUST first
yield every worker it already knows as "added", then deltas, and MUST be
safe to cancel at any await. Four backends ship:

- `StaticDiscovery` (``_static``): a fixed list of addresses, and an
  in-memory double (`add`/`drop` drive it from tests);
- `LocalDiscovery` (``_local``): workers on this machine, through a
  registry directory (``worker_main --discovery local``);
- `LanDiscovery` (``_lan``, the only zeroconf importer, loaded on first
  use): workers on the LAN, through DNS-SD;
- `StoreDiscovery` (``_store``, loaded on first use): workers recorded in a
  table in PostgreSQL or SQLite (``_registry``; ``worker_main --registry``),
  with no multicast. Its worker's side is ``pool/_worker/_registry.py``.

Each backend module also holds the worker's side of it (the publisher),
since both ends must agree on the record's format. A worker's record, as
published: uid, address, pid, version, tags, capacity and whether it
serves TLS (`WorkerMetadata`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._base import lazy_attribute
from ._local import LocalDiscovery as LocalDiscovery
from ._local import LocalPublisher as LocalPublisher
from ._local import record_to_json as record_to_json
from ._protocol import DiscoveryEvent as DiscoveryEvent
from ._protocol import DiscoveryLike as DiscoveryLike
from ._static import StaticDiscovery as StaticDiscovery

if TYPE_CHECKING:
    from ._lan import LanDiscovery as LanDiscovery
    from ._lan import LanPublisher as LanPublisher
    from ._lan import advertised_addresses as advertised_addresses
    from ._registry import Registry as Registry
    from ._registry import connect as connect
    from ._registry import seal_record as seal_record
    from ._store import StoreDiscovery as StoreDiscovery

LAZY = {
    "LanDiscovery": "._lan",
    "LanPublisher": "._lan",
    "advertised_addresses": "._lan",
    "Registry": "._registry",
    "connect": "._registry",
    "seal_record": "._registry",
    "StoreDiscovery": "._store",
}
"""Names whose modules load on first use (`pool._base._lazy`): zeroconf and the registry stores load only for a pool or worker that uses them."""


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, LAZY, globals(), name)


__all__ = [
    "DiscoveryEvent",
    "DiscoveryLike",
    "LanDiscovery",
    "LanPublisher",
    "LocalDiscovery",
    "LocalPublisher",
    "Registry",
    "StaticDiscovery",
    "StoreDiscovery",
    "advertised_addresses",
    "connect",
    "record_to_json",
    "seal_record",
]
