"""Seeing a pool: its metrics, its observation port, fan-out progress (its terminal view: pool._cli).

_observer     a pool's observation port: metrics and the /status document
_metrics      the dispatching side's Prometheus metrics (the metrics extra)
_http         the small GET-only HTTP server both processes serve /, /metrics and /status on
_page         the page GET / serves (page.html: one self-contained file)
_trace        OpenTelemetry spans for calls and job attempts (the otel extra; only with a provider)
_stats        PoolStats and GateStats: snapshots of a pool's load
_progress     pool.map's progress reports and its rich bar
"""
