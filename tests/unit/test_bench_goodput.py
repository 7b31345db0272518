"""Goodput: the definition of `vllm bench serve --goodput`, its option syntax and scenario keys."""

from __future__ import annotations

import pytest

from engine.bench.client import RequestResult
from engine.bench.report import EngineSeries, goodput_of, is_good, samples_of
from engine.bench.scenario import load_scenario, parse_goodput, to_yaml
from engine.errors import BadInput


def _ok(i: int, ttft: float, e2e: float, tokens: int) -> RequestResult:
    return RequestResult(index=i, phase=0, sent_s=float(i), ok=True, ttft_s=ttft, e2e_s=e2e, output_tokens=tokens)


def test_a_request_counts_when_it_meets_every_target_given():
    slo = {"ttft": 300.0, "tpot": 50.0, "e2el": 8000.0}
    results = [
        _ok(0, 0.300, 0.300 + 0.050 * 9, 10),  # exactly at every target: counts (vLLM compares with >=)
        _ok(1, 0.301, 1.0, 10),  # TTFT over
        _ok(2, 0.1, 0.1 + 0.051 * 9, 10),  # TPOT over
        _ok(3, 0.1, 8.5, 1),  # one token: TPOT 0, but E2E over
        _ok(4, 0.1, 0.2, 1),  # one token: TPOT counts as 0, as in vLLM
        RequestResult(index=5, phase=0, sent_s=5.0, ok=False, error="http_500"),  # a failure never counts
    ]
    g = goodput_of(results, slo, load_s=2.0)
    assert g.good == 2 and g.share == pytest.approx(2 / 6) and g.rate == pytest.approx(1.0)
    # Only the targets given are judged.
    assert goodput_of(results, {"ttft": 300.0}, 2.0).good == 4
    assert is_good(0.1, None, 0.2, {"tpot": 0.0})


def test_the_option_takes_vllms_syntax():
    assert parse_goodput(["ttft:300", "tpot:50", "e2el:8000"]) == {"ttft": 300.0, "tpot": 50.0, "e2el": 8000.0}
    assert parse_goodput(["ttft:300,tpot:50.5"]) == {"ttft": 300.0, "tpot": 50.5}
    for bad in (["ttft"], ["itl:5"], ["ttft:-1"], ["ttft:abc"], ["ttft:nan"], []):
        with pytest.raises(BadInput, match="--goodput"):
            parse_goodput(bad)


def test_scenario_goodput_keys_are_checked_and_round_trip(tmp_path):
    f = tmp_path / "g.yaml"
    f.write_text(
        "phases: [{duration_s: 5, concurrency: 2}]\nprompt_tokens: 16\nmax_tokens: 8\n"
        "goodput: {ttft: 300, e2el: 8000}\nslo: {goodput_share: 0.99}\n"
    )
    sc = load_scenario(str(f))
    assert sc.goodput == {"ttft": 300.0, "e2el": 8000.0} and sc.slo == {"goodput_share": 0.99}
    again = tmp_path / "again.yaml"
    again.write_text(to_yaml(sc))
    assert load_scenario(str(again)).goodput == sc.goodput
    f.write_text(
        "phases: [{duration_s: 5, concurrency: 2}]\nprompt_tokens: 16\nmax_tokens: 8\n"
        "goodput: {ttft: -3, itl: 5}\nslo: {goodput_share: 0.5}\n"
    )
    with pytest.raises(BadInput) as err:
        load_scenario(str(f))
    assert "g.yaml:4: itl: unknown key in goodput (known: e2el, tpot, ttft)" in err.value.cause
    assert "g.yaml:4: ttft: must be >= 0" in err.value.cause and "needs `goodput:`" not in err.value.cause
    f.write_text(
        "phases: [{duration_s: 5, concurrency: 2}]\nprompt_tokens: 16\nmax_tokens: 8\nslo: {goodput_share: 0.5}\n"
    )
    with pytest.raises(BadInput, match="goodput_share: needs `goodput:`"):
        load_scenario(str(f))


def test_samples_are_kept_per_request_and_itl_is_capped():
    results = [_ok(1, 0.1, 0.5, 5), RequestResult(index=0, phase=0, sent_s=0.5, ok=False, error="timeout")]
    s = samples_of(results, [0.001] * 30_000, seed=0, engine=EngineSeries())
    assert s.sent_s == (0.5, 1.0) and s.error == ("timeout", None)
    assert s.ttft_ms == (None, 100.0) and s.tpot_ms == (None, 100.0) and s.e2e_ms == (None, 500.0)
    assert len(s.itl_ms) == 20_000 and s.itl_count == 30_000
