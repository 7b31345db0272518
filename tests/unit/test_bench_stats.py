"""Percentiles, SLO verdicts, queue drain and prompt sizing."""

from __future__ import annotations

import asyncio
import random

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.bench.prompts import PromptMaker, estimate_tokens
from engine.bench.report import judge, queue_figures
from engine.bench.scenario import load_scenario, with_duration
from engine.bench.schedule import windows
from engine.bench.stats import percentile, summarize
from engine.bench.stub import StubConfig, StubThread, stub_token_count


def test_percentiles_match_the_linear_definition():
    v = [float(i) for i in range(1, 101)]
    assert percentile(v, 50) == pytest.approx(50.5)
    assert percentile(v, 90) == pytest.approx(90.1)
    assert percentile(v, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=1, max_size=300))
def test_summary_is_ordered(values):
    s = summarize(values)
    assert s.min <= s.p50 <= s.p90 <= s.p99 <= s.max
    assert s.count == len(values)


def test_summary_scales_seconds_to_ms_and_empty_is_none():
    s = summarize([0.1, 0.2, 0.3], 1000)
    assert s.p50 == pytest.approx(200) and s.max == pytest.approx(300)
    assert summarize([]).p99 is None and summarize([]).count == 0


def test_verdicts_respect_direction_and_missing_values():
    v = {
        x.name: x
        for x in judge(
            {"ttft_p99_ms": 500, "output_tokens_per_s": 100, "error_rate": 0, "queue_drain_s": 5},
            {"ttft_p99_ms": 499.0, "output_tokens_per_s": 99.0, "error_rate": 0.0, "queue_drain_s": None},
        )
    }
    assert v["ttft_p99_ms"].ok and v["error_rate"].ok
    assert not v["output_tokens_per_s"].ok  # a minimum
    assert not v["queue_drain_s"].ok and v["queue_drain_s"].actual is None  # never drained: a miss


def test_queue_drain_is_measured_from_the_end_of_the_burst():
    sc = with_duration(load_scenario("burst"), 30)  # phases 0-10, 10-20, 20-30
    samples = [(1.0, 2.0), (5.0, 2.0), (9.0, 3.0), (12.0, 40.0), (19.0, 45.0), (21.0, 30.0), (23.5, 2.0), (26.0, 0.0)]
    q = queue_figures(sc, samples, windows(sc))
    assert q.baseline == 2.0 and q.peak == 45.0
    assert q.drain_s == pytest.approx(3.5)
    never = queue_figures(sc, samples[:6], windows(sc))
    assert never.drain_s is None


def test_estimate_counts_words_and_chinese_characters():
    assert estimate_tokens("hello world") == 3
    assert estimate_tokens("你好世界") == 4
    assert estimate_tokens("") == 1


def test_prompts_hit_the_token_target_with_the_servers_tokenizer():
    async def make(url: str) -> tuple[PromptMaker, list[tuple[int, str]]]:
        maker = PromptMaker(seed=1)
        async with httpx.AsyncClient(base_url=url) as client:
            await maker.calibrate(client, "stub")
        rng = random.Random(2)
        return maker, [(n, maker.make(i, n, rng)) for i, n in enumerate((12, 64, 200, 1000))]

    with StubThread(StubConfig()) as stub:
        maker, prompts = asyncio.run(make(stub.url))
    assert maker.measured
    for n, text in prompts:
        assert stub_token_count(text) == n
    assert len({p[:7] for _, p in prompts}) == len(prompts)  # unique tags defeat the prefix cache
    assert any("\u4e00" <= ch <= "\u9fff" for _, p in prompts for ch in p)  # mixed Chinese / English
    assert any(ch.isascii() and ch.isalpha() for _, p in prompts for ch in p)


def test_prompts_fall_back_to_estimates_without_tokenize():
    async def make(url: str) -> PromptMaker:
        maker = PromptMaker()
        async with httpx.AsyncClient(base_url=url) as client:
            await maker.calibrate(client, "stub")
        return maker

    with StubThread(StubConfig(tokenize=False)) as stub:
        maker = asyncio.run(make(stub.url))
    assert not maker.measured
    text = maker.make(0, 300, random.Random(0))
    assert estimate_tokens(text) == pytest.approx(300, rel=0.1)


def _report(sc, queue, interrupted):
    from engine.bench.report import build_report

    return build_report(
        sc=sc,
        url="http://x",
        model="m",
        started_at="now",
        results=[],
        cancelled=0,
        load_s=5.0,
        windows=windows(sc),
        interrupted=interrupted,
        sizing="estimate",
        server=None,
        queue=queue,
        notes=[],
    )


def test_a_burst_that_queued_nothing_has_no_drain_time():
    sc = with_duration(load_scenario("burst"), 30)
    flat = [(1.0, 0.0), (12.0, 0.0), (19.0, 0.0), (21.18, 0.0)]
    q = queue_figures(sc, flat, windows(sc))
    assert q.formed is False and q.drain_s is None  # not "1.18 s": nothing drained
    verdict = {v.name: v for v in _report(sc, q, interrupted=False).slo}["queue_drain_s"]
    assert verdict.ok is None and verdict.actual is None  # N/A, not a miss


def test_an_interrupted_run_has_no_drain_verdict():
    sc = with_duration(load_scenario("burst"), 30)
    q = queue_figures(sc, [(1.0, 0.0), (12.0, 30.0)], windows(sc))  # stopped during the burst
    report = _report(sc, q, interrupted=True)
    assert {v.name: v.ok for v in report.slo}["queue_drain_s"] is None and report.passed is False


def test_kv_usage_must_come_back_down_after_the_burst():
    sc = with_duration(load_scenario("burst"), 30)  # phases 0-10, 10-20, 20-30
    waiting = [(1.0, 0.0), (12.0, 5.0), (21.0, 0.0)]
    kv = [(1.0, 0.30), (5.0, 0.32), (12.0, 0.95), (19.0, 0.97), (21.0, 0.80), (23.0, 0.36), (26.0, 0.31)]
    q = queue_figures(sc, waiting, windows(sc), kv)
    assert q.kv_baseline == pytest.approx(0.31) and q.kv_peak == 0.97 and q.kv_formed
    assert q.kv_drain_s == pytest.approx(3.0)  # 0.36 is within 5 points of 0.31
    stuck = queue_figures(sc, waiting, windows(sc), kv[:5])
    assert stuck.kv_drain_s is None and stuck.kv_formed
    flat = queue_figures(sc, waiting, windows(sc), [(1.0, 0.3), (12.0, 0.33), (22.0, 0.3)])
    assert not flat.kv_formed and flat.kv_drain_s is None
    assert queue_figures(sc, waiting, windows(sc)).kv_peak is None  # the engine reports no KV usage


def test_mean_latency_slos_are_judged():
    v = {
        x.name: x.ok
        for x in judge({"ttft_mean_ms": 100, "e2e_mean_ms": 50}, {"ttft_mean_ms": 90.0, "e2e_mean_ms": 51.0})
    }
    assert v == {"ttft_mean_ms": True, "e2e_mean_ms": False}
