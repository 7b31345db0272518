"""vLLM's Prometheus endpoint: scrape, parse, and the headline figures every view needs."""

from engine.metrics.prom import EngineMetrics, parse_metrics, scrape

__all__ = ["EngineMetrics", "parse_metrics", "scrape"]
