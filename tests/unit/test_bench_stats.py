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


def test_a_burst_with_no_reading_inside_it_says_so_and_invents_no_drain_time():
    # Every /metrics page taken during the burst came back too late (or not at all): before, the
    # report said a queue formed and timed its "drain" from the first reading after the burst.
    sc = with_duration(load_scenario("burst"), 30)  # phases 0-10, 10-20, 20-30
    samples = [(1.0, 2.0), (5.0, 2.0), (9.0, 2.0), (21.0, 30.0), (23.5, 2.0)]
    q = queue_figures(sc, samples, windows(sc))
    assert q.peak is None and q.formed is None and q.drain_s is None and q.samples == 5


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


def _first_bench(n_ok: int, lag_s: float, itl_s: tuple[float, ...] = (0.004,) * 31):
    """`bench run --scenario chat-qa --scale 0.25 --duration 20`: 8 req/s Poisson of 32-token
    answers for 20 s, 231.2 tok/s wanted; `n_ok` answers came back, each `lag_s` late."""
    from engine.bench.client import RequestResult
    from engine.bench.report import build_report
    from engine.bench.scenario import scaled

    sc = with_duration(scaled(load_scenario("chat-qa"), 0.25), 20)
    results = [
        RequestResult(
            index=i,
            phase=0,
            sent_s=i * 20 / n_ok,
            ok=True,
            ttft_s=0.05,
            e2e_s=0.2,
            itl_s=itl_s,
            output_tokens=32,
            usage_reported=True,
            lag_s=lag_s,
        )  # fmt: skip
        for i in range(n_ok)
    ]
    return build_report(
        sc=sc, url="http://x", model="m", started_at="now", results=results, cancelled=0, load_s=20.0,
        windows=windows(sc), interrupted=False, sizing="estimate", server=None, queue=None, notes=[],
    )  # fmt: skip


def test_a_throughput_missed_because_our_client_fell_behind_is_not_a_fail():
    from ascendctl.commands.bench import verdict_line

    report = _first_bench(130, lag_s=0.45)  # 208 tok/s: the client sent late, the server kept up
    tput = {v.name: v for v in report.slo}["output_tokens_per_s"]
    assert tput.actual == pytest.approx(208.0) and tput.actual < tput.target
    assert tput.ok is None and tput.why.startswith("client-bound: the load generator fell behind")
    assert report.passed
    assert verdict_line(report) == "verdict: PASS (3 SLOs met, output_tokens_per_s not judged, client-bound)"


def test_a_throughput_short_by_less_than_the_runs_noise_is_not_a_fail():
    report = _first_bench(140, lag_s=0.0)  # 224 tok/s: 3% short; 160 Poisson arrivals vary ~16%
    tput = {v.name: v for v in report.slo}["output_tokens_per_s"]
    assert tput.ok is None and tput.why.startswith("within noise: 3% short")
    assert report.passed


def test_a_throughput_far_below_the_target_still_fails():
    report = _first_bench(80, lag_s=0.0)  # 128 tok/s: 45% short, on time: the server's doing
    tput = {v.name: v for v in report.slo}["output_tokens_per_s"]
    assert tput.ok is False and tput.why == "" and not report.passed


def test_small_latencies_keep_their_digits_and_a_zero_itl_p50_is_explained():
    from rich.console import Console

    from ascendctl.commands.bench import render_report

    # tokens that arrive in one read share its time: most gaps are 0, a few carry the wait
    report = _first_bench(150, lag_s=0.0, itl_s=(0.0,) * 20 + (0.000042,) * 11)
    console = Console(width=120, record=True)
    render_report(console, report)
    text = console.export_text()
    itl = next(line for line in text.splitlines() if line.lstrip().startswith("ITL"))
    assert itl.split("│")[1].strip() == "0" and "0.042" in itl  # not 0.0
    assert "ITL p50 is 0 ms: most tokens reached the client in one read" in text
