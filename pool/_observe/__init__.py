"""Seeing a pool: its metrics, its observation port, fan-out progress (its terminal view: pool._cli).

_observer     a pool's observation port: metrics and the /status document
_metrics      the dispatching side's Prometheus metrics (the metrics extra)
_http         the small GET-only HTTP server both processes serve /, /metrics and /status on
_page         the page GET / serves (page.html: one self-contained file)
_trace        OpenTelemetry spans for calls and job attempts (the otel extra; only with a provider)
_stats        PoolStats and GateStats: snapshots of a pool's load; PoolDebug: of its insides
_progress     pool.map's progress reports and its rich bar
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._base import lazy_attribute
from ._trace import active_tracer as active_tracer
from ._trace import remote_context as remote_context
from ._trace import traced as traced
from ._trace import traceparent as traceparent

if TYPE_CHECKING:
    from ._http import ObservationServer as ObservationServer
    from ._metrics import PoolMetrics as PoolMetrics
    from ._observer import PoolObserver as PoolObserver
    from ._progress import Progress as Progress
    from ._progress import known_length as known_length
    from ._progress import reporter as reporter
    from ._stats import GateStats as GateStats
    from ._stats import PoolDebug as PoolDebug
    from ._stats import PoolStats as PoolStats
    from ._stats import WorkerSignals as WorkerSignals

LAZY = {
    "ObservationServer": "._http",
    "PoolMetrics": "._metrics",
    "PoolObserver": "._observer",
    "Progress": "._progress",
    "known_length": "._progress",
    "reporter": "._progress",
    "GateStats": "._stats",
    "PoolDebug": "._stats",
    "PoolStats": "._stats",
    "WorkerSignals": "._stats",
}
"""Names whose modules load on first use (`pool._base._lazy`): the dispatching side's observation (prometheus-client and rich load only for a pool that uses them)."""


def __getattr__(name: str) -> object:
    return lazy_attribute(__name__, LAZY, globals(), name)


__all__ = [
    "GateStats",
    "ObservationServer",
    "PoolMetrics",
    "PoolObserver",
    "PoolStats",
    "Progress",
    "WorkerSignals",
    "active_tracer",
    "known_length",
    "remote_context",
    "reporter",
    "traced",
    "traceparent",
]
