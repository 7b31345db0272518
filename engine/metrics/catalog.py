"""The engine figures of vLLM's /metrics that ascendctl reads, one row each.

A row says where vLLM publishes the figure (its family names, which moved between versions:
`gpu_cache_usage_perc` became `kv_cache_usage_perc`), what kind of series it is, and where it
lands in a `top` snapshot. The parser (`prom`), the rate tracker (`rates`), the collector and the
snapshot's `EngineView` / `EngineRates` fields are derived from this table, so a new figure is one
row here and its place in the renderer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

GAUGE = "gauge"  # a value as scraped
COUNTER = "counter"  # a running total: shown as a rate per second, or its increase over the window
HISTOGRAM = "histogram"  # cumulative buckets: shown as p50 / p90 / p99 of the window


@dataclass(frozen=True)
class Metric:
    key: str  # its attribute on EngineMetrics (one scrape)
    names: tuple[str, ...]  # metric family names, newest vLLM first; "<name>_total" is read too
    kind: str
    view: bool = False  # the scraped value is an EngineView field named `key`
    rate: str | None = None  # counters: the EngineRates field of its rate per second
    # Counters: the EngineRates field of its increase over the window; histograms: of the
    # window's percentiles.
    window: str | None = None
    # A sparkline series is kept of the view field (gauges) or of the rate (counters).
    history: bool = False
    # Histograms only: read by the live dashboard. Its parse keeps only the buckets it shows.
    live: bool = True
    # Counters: its window field comes after every field EngineRates had before it (scripts read
    # the JSON's fields in place).
    appended: bool = False

    @property
    def history_key(self) -> str:
        return self.rate or self.key


# The order is the order of the fields in the snapshot's JSON.
METRICS: tuple[Metric, ...] = (
    Metric("running", ("vllm:num_requests_running",), GAUGE, view=True, history=True),
    Metric("waiting", ("vllm:num_requests_waiting",), GAUGE, view=True, history=True),
    # 0..1: the KV pool (`rates.kv_pool`) turns it into blocks.
    Metric("kv_usage", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"), GAUGE),
    Metric(
        "prompt_tokens", ("vllm:prompt_tokens", "vllm:prompt_tokens_total"), COUNTER, rate="prompt_tps", history=True
    ),
    Metric(
        "generation_tokens",
        ("vllm:generation_tokens", "vllm:generation_tokens_total"),
        COUNTER,
        rate="generation_tps",
        history=True,
    ),
    Metric("requests_ok", ("vllm:request_success", "vllm:request_success_total"), COUNTER, rate="requests_per_s"),
    Metric(
        "preemptions",
        ("vllm:num_preemptions", "vllm:num_preemptions_total"),
        COUNTER,
        view=True,
        rate="preemptions_per_s",
        window="preemptions_in_window",
    ),
    Metric("admission_rejections", ("vllm:admission_rejections",), COUNTER, view=True, rate="rejections_per_s"),
    # A KV consumer's (a decode instance's) requests waiting for their KV from prefill, every stage
    # summed (vLLM 0.32+: waiting_to_start, in_progress, completed_waiting); absent elsewhere.
    Metric("kv_fetching", ("vllm:num_requests_kv_fetch_by_stage",), GAUGE, view=True),
    # KV transfers that failed (NIXL: handshakes and notifications included), and the requests a
    # prefill instance held KV for that no decoder fetched in time: kv-transfer-failing
    # (engine/telemetry/kvtransfer.py). Absent where the connector exports no metrics.
    Metric("kv_failed", ("vllm:nixl_num_failed_transfers",), COUNTER, window="kv_failed_in_window", appended=True),
    Metric("kv_expired", ("vllm:nixl_num_kv_expired_reqs",), COUNTER, window="kv_expired_in_window", appended=True),
    # Read together as the prefix-cache hit rate over the window (`RateTracker`).
    Metric("prefix_queries", ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"), COUNTER),
    Metric("prefix_hits", ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"), COUNTER),
    Metric("ttft", ("vllm:time_to_first_token_seconds",), HISTOGRAM, window="ttft"),
    # TPOT was renamed ITL in vLLM 0.10.
    Metric("itl", ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"), HISTOGRAM, window="itl"),
    Metric("e2e", ("vllm:e2e_request_latency_seconds",), HISTOGRAM, live=False),  # bench and scripts
    # The KV connector's transfers, where it exports them (NIXL: nixl/stats.py of vLLM's
    # kv_connector; Mooncake on vllm-ascend exports none): read over the window as transfers/s,
    # bytes/s, the average transfer time and descriptors (`rates.KvTransfer`).
    Metric("kv_xfer_time", ("vllm:nixl_xfer_time_seconds",), HISTOGRAM),
    Metric("kv_xfer_bytes", ("vllm:nixl_bytes_transferred",), HISTOGRAM),
    Metric("kv_xfer_descriptors", ("vllm:nixl_num_descriptors",), HISTOGRAM),
)

SCALARS = tuple(m for m in METRICS if m.kind != HISTOGRAM)
HISTOGRAMS = tuple(m for m in METRICS if m.kind == HISTOGRAM)
COUNTERS = tuple(m for m in METRICS if m.kind == COUNTER)
VIEW_FIELDS = tuple(m.key for m in SCALARS if m.view)
RATE_FIELDS = tuple(m.rate for m in COUNTERS if m.rate)
HISTORY_KEYS = tuple(m.history_key for m in METRICS if m.history)


def optional_fields(
    names: tuple[str, ...], tp: Any = float | None, factory: Callable[[], Any] | None = None
) -> list[tuple[str, Any, Any]]:
    """`make_dataclass` specs of the fields `names`, each None by default (or `factory()`)."""
    return [
        (n, tp, dataclasses.field(default=None) if factory is None else dataclasses.field(default_factory=factory))
        for n in names
    ]


__all__ = [
    "COUNTER",
    "COUNTERS",
    "GAUGE",
    "HISTOGRAM",
    "HISTOGRAMS",
    "HISTORY_KEYS",
    "METRICS",
    "Metric",
    "RATE_FIELDS",
    "SCALARS",
    "VIEW_FIELDS",
    "optional_fields",
]
