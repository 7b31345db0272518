"""From successive scrapes to what an operator reads: rates, percentiles, the KV block pool.

Counters become rates over the interval actually measured between two scrapes (not the nominal
refresh period: a slow scrape stretches it). Histograms become p50 / p90 / p99 of the
observations that arrived inside a sliding window, from the difference of the cumulative buckets
at both ends of the window, interpolated inside a bucket the way Prometheus'
`histogram_quantile` does.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from engine.metrics.catalog import COUNTERS, HISTOGRAMS, RATE_FIELDS, optional_fields
from engine.metrics.prom import EngineMetrics, Histogram

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Percentiles:
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: float = 0.0  # observations inside the window


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile of cumulative (upper bound, count) buckets; None without observations."""
    if not buckets:
        return None
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                # Past the last finite bound: the best we can say is "at least" that bound.
                return lower_bound
            if count == lower_count:
                return upper
            return lower_bound + (upper - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = upper, count
    return buckets[-1][0]


def histogram_delta(new: Histogram, old: Histogram | None) -> Histogram | None:
    """Observations between two scrapes; None when the engine restarted (counts went down)."""
    if old is None:
        return new
    before = dict(old.buckets)
    buckets = tuple((le, count - before.get(le, 0.0)) for le, count in new.buckets)
    if new.count < old.count or any(c < 0 for _, c in buckets):
        return None
    return Histogram(buckets, new.count - old.count, new.sum - old.sum)


def percentiles(hist: Histogram | None) -> Percentiles:
    if hist is None or hist.count <= 0:
        return Percentiles()
    p50, p90, p99 = (histogram_quantile(q, hist.buckets) for q in QUANTILES)
    return Percentiles(p50, p90, p99, hist.count)


@dataclass(frozen=True)
class KvPool:
    """The KV block pool: total from the engine (config metric or start-up log) x usage."""

    total_blocks: int | None
    used_blocks: int | None
    usage: float | None  # 0..1
    block_size: int | None = None
    source: str | None = None  # where total_blocks came from: "metrics" | "log"

    @property
    def free_blocks(self) -> int | None:
        if self.total_blocks is None or self.used_blocks is None:
            return None
        return self.total_blocks - self.used_blocks


def kv_pool(metrics: EngineMetrics, log_blocks: int | None = None, log_tokens: int | None = None) -> KvPool:
    """Blocks from `vllm:cache_config_info` `num_gpu_blocks`, else from the start-up log (a block
    count, or a token capacity divided by the block size)."""
    block_size = metrics.config_int("block_size")
    total, source = metrics.config_int("num_gpu_blocks"), "metrics"
    if total is None:
        source = "log"
        total = log_blocks
        if total is None and log_tokens is not None and block_size:
            total = log_tokens // block_size
    if total is None:
        source = None
    usage = metrics.kv_usage
    used = None if total is None or usage is None else int(round(total * usage))
    return KvPool(total, used, usage, block_size, source)


@dataclass(frozen=True)
class KvTransfer:
    """The KV connector's transfers over the window, from its own metrics (NIXL's
    `vllm:nixl_*`). Absent (None on EngineRates) where the connector exports none."""

    transfers: float | None = None  # finished in the window
    transfers_per_s: float | None = None
    bytes_per_s: float | None = None
    avg_transfer_s: float | None = None  # None without a transfer in the window
    avg_descriptors: float | None = None
    failed: float | None = None  # failed transfers (handshakes, notifications) in the window
    expired: float | None = None  # requests whose KV no decoder fetched in time (prefill side)


def kv_transfer(
    new: EngineMetrics, old: EngineMetrics, span_s: float, failed: float | None, expired: float | None
) -> KvTransfer | None:
    """The window's transfer figures between the scrapes `old` and `new`, `span_s` apart."""
    hists = {k: new.histogram(k) for k in ("kv_xfer_time", "kv_xfer_bytes", "kv_xfer_descriptors")}
    if all(h is None for h in hists.values()) and new.kv_failed is None and new.kv_expired is None:
        return None
    delta = {k: histogram_delta(h, old.histogram(k)) if h is not None else None for k, h in hists.items()}
    xfer, size, descs = delta["kv_xfer_time"], delta["kv_xfer_bytes"], delta["kv_xfer_descriptors"]
    per_s = (lambda v: v / span_s) if span_s > 0 else (lambda v: None)
    return KvTransfer(
        transfers=xfer.count if xfer is not None else None,
        transfers_per_s=per_s(xfer.count) if xfer is not None else None,
        bytes_per_s=per_s(size.sum) if size is not None else None,
        avg_transfer_s=xfer.sum / xfer.count if xfer is not None and xfer.count > 0 else None,
        avg_descriptors=descs.sum / descs.count if descs is not None and descs.count > 0 else None,
        failed=failed,
        expired=expired,
    )


# Figures derived from the last two scrapes and the window; None until they exist. A field per
# counter rate and window of the catalog, and the figures derived from several series.
EngineRates = dataclasses.make_dataclass(
    "EngineRates",
    [
        ("interval_s", float | None, field(default=None)),
        *optional_fields(RATE_FIELDS),
        *optional_fields(tuple(m.window for m in COUNTERS if m.window and not m.appended)),
        ("prefix_hit_rate", float | None, field(default=None)),  # 0..1 over the window
        ("cached_tps_by_tier", Mapping[str, float], field(default_factory=dict)),  # device / host / ...
        ("offload_per_s", Mapping[str, float], field(default_factory=dict)),  # vllm:kv_offload_* counters
        *optional_fields(tuple(m.window for m in HISTOGRAMS if m.window), Percentiles, factory=Percentiles),
        # The seconds the window figures cover: less than the window until the scrapes span it
        # (`top --once` takes two scrapes a second apart). Last, so existing fields keep their places.
        ("window_span_s", float | None, field(default=None)),
        *optional_fields(tuple(m.window for m in COUNTERS if m.window and m.appended)),
        # The KV connector's transfers (None where it exports no figures). Last, as above.
        ("kv_transfer", KvTransfer | None, field(default=None)),
    ],
    namespace={"__module__": __name__},
    frozen=True,
)


def _rate(new: float | None, old: float | None, dt: float) -> float | None:
    if new is None or old is None or dt <= 0 or new < old:  # new < old: the engine restarted
        return None
    return (new - old) / dt


_OFFLOAD_PREFIXES = ("vllm:kv_offload", "vllm:simple_kv_offload")


class RateTracker:
    """Feed it each scrape of one engine with the monotonic time it was taken."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._history: deque[tuple[float, EngineMetrics]] = deque()

    def reset(self) -> None:
        self._history.clear()

    def update(self, t: float, metrics: EngineMetrics) -> EngineRates:
        previous = self._history[-1] if self._history else None
        self._history.append((t, metrics))
        # Keep one scrape at or before the window start so the window is fully covered.
        while len(self._history) > 2 and self._history[1][0] <= t - self.window_s:
            self._history.popleft()
        if previous is None:
            return EngineRates()
        t0, m0 = previous
        dt = t - t0
        oldest_t, oldest = self._history[0]

        def window_delta(attr: str) -> float | None:
            new, old = getattr(metrics, attr), getattr(oldest, attr)
            return None if new is None or old is None or new < old else new - old

        hits, queries = window_delta("prefix_hits"), window_delta("prefix_queries")
        if queries:
            hit_rate = hits / queries if hits is not None else None
        else:
            legacy = metrics.samples.get("vllm:gpu_prefix_cache_hit_rate")  # V0 gauge; -1 = off
            hit_rate = legacy if legacy is not None and legacy >= 0 else None

        tiers_new = metrics.breakdowns.get("vllm:prompt_tokens_cached_by_source_total", {})
        tiers_old = m0.breakdowns.get("vllm:prompt_tokens_cached_by_source_total", {})
        tiers = {k: r for k, v in tiers_new.items() if (r := _rate(v, tiers_old.get(k), dt)) is not None}
        offload = {
            name: r
            for name, v in metrics.samples.items()
            if name.startswith(_OFFLOAD_PREFIXES)
            and name.endswith("_total")
            and (r := _rate(v, m0.samples.get(name), dt)) is not None
        }

        def window_percentiles(key: str) -> Percentiles:
            new = metrics.histogram(key)
            if new is None:
                return Percentiles()
            return percentiles(histogram_delta(new, oldest.histogram(key)))

        windows = {m.window: window_delta(m.key) for m in COUNTERS if m.window}
        return EngineRates(
            interval_s=dt,
            **{m.rate: _rate(getattr(metrics, m.key), getattr(m0, m.key), dt) for m in COUNTERS if m.rate},
            **windows,
            prefix_hit_rate=hit_rate,
            cached_tps_by_tier=tiers,
            offload_per_s=offload,
            **{m.window: window_percentiles(m.key) for m in HISTOGRAMS if m.window},
            window_span_s=t - oldest_t,
            kv_transfer=kv_transfer(
                metrics, oldest, t - oldest_t, windows.get("kv_failed_in_window"), windows.get("kv_expired_in_window")
            ),
        )
