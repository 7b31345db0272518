"""vLLM's Prometheus endpoint: scrape, parse, and the headline figures every view needs;
rates, sliding-window percentiles and the KV block pool derived from successive scrapes."""

from engine.metrics.prom import EngineMetrics, Histogram, LeanParser, parse_metrics, scrape
from engine.metrics.rates import EngineRates, KvPool, Percentiles, RateTracker, histogram_quantile, kv_pool
from engine.metrics.startup_log import KvCapacity, parse_kv_capacity

__all__ = [
    "EngineMetrics",
    "EngineRates",
    "Histogram",
    "KvCapacity",
    "KvPool",
    "LeanParser",
    "Percentiles",
    "RateTracker",
    "histogram_quantile",
    "kv_pool",
    "parse_kv_capacity",
    "parse_metrics",
    "scrape",
]
