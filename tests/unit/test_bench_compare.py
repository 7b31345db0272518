"""bench compare: bootstrap noise verdicts on recorded reports with a known difference and with none."""

from __future__ import annotations

import json
import random

import pytest
from helpers import FIXTURES

from engine.bench.compare import _percentile_boot, compare, load_report
from engine.bench.stats import percentile
from engine.errors import BadInput

BENCH = FIXTURES / "bench"


def _docs(*names: str) -> tuple[list[dict], list[str]]:
    return [load_report(BENCH / f"{n}.json") for n in names], [f"{n}.json" for n in names]


def _rows(result) -> dict:
    return {row.name: row for row in result.figures}


def test_a_known_slowdown_is_worse_beyond_noise():
    # slow.json: the stub's tokens 50% slower and its first token later than in base.json.
    result = compare(*_docs("base", "slow"), fail_if_worse_pct=10)
    rows = _rows(result)
    for name in ("ttft_p50_ms", "itl_p50_ms", "tpot_p50_ms", "e2e_p50_ms", "e2e_p99_ms"):
        change = rows[name].changes[0]
        assert change.verdict == "worse" and change.beyond_noise, name
        assert change.change_pct > 20 and change.ci_pct[0] > 0, name
    assert rows["output_tokens_per_s"].changes[0].verdict == "worse"
    assert rows["output_tokens_per_s"].changes[0].change_pct < -20
    assert rows["error_rate"].changes[0].verdict == "same"  # no errors in either
    assert not result.passed and any(w.startswith("ITL p50 in slow.json") for w in result.worse)


def test_the_same_server_twice_is_not_worse_beyond_the_threshold():
    result = compare(*_docs("base", "same"), fail_if_worse_pct=10)
    assert result.passed, result.worse
    # Most figures are within noise; a few drift a little beyond it between two runs of one
    # machine, which is what the threshold of --fail-if-worse is for.
    verdicts = [row.changes[0].verdict for row in result.figures]
    assert verdicts.count("same") >= len(verdicts) / 2
    for row in result.figures:
        change = row.changes[0]
        assert change.change_pct is None or abs(change.change_pct) < 15, row.name


def test_verdicts_repeat_with_a_seed_and_goodput_uses_the_baseline_targets():
    a = compare(*_docs("base", "same", "slow"), seed=3)
    b = compare(*_docs("base", "same", "slow"), seed=3)
    assert a == b
    assert a.goodput_slo_ms == {"ttft": 40.0, "tpot": 6.0, "e2el": 120.0}
    rows = _rows(a)
    assert rows["goodput_share"].changes[1].value == 0.0  # every slow request misses tpot 6 ms
    assert [c.report for c in rows["ttft_p99_ms"].changes] == ["same.json", "slow.json"]


def test_the_percentile_shortcut_draws_what_plain_resampling_draws():
    rng = random.Random(0)
    values = [rng.lognormvariate(3, 0.6) for _ in range(400)]
    fast = sorted(_percentile_boot(values, 90, random.Random(1), 4000))
    plain = []
    r = random.Random(2)
    for _ in range(4000):
        plain.append(percentile(sorted(r.choices(values, k=len(values))), 90))
    plain.sort()
    for q in (5, 25, 50, 75, 95):
        assert percentile(fast, q) == pytest.approx(percentile(plain, q), rel=0.02)


def test_reports_without_samples_compare_without_a_noise_verdict(tmp_path):
    docs, names = _docs("base", "slow")
    for d in docs:
        d.pop("samples")
    result = compare(docs, names)
    change = _rows(result)["ttft_p50_ms"].changes[0]
    assert change.beyond_noise is None and change.ci_pct is None and change.change_pct > 20
    assert any("keeps no per-request samples" in n for n in result.notes)


def test_a_file_that_is_no_report_is_bad_input(tmp_path):
    f = tmp_path / "x.json"
    f.write_text(json.dumps({"hello": 1}))
    with pytest.raises(BadInput, match="not a bench report"):
        load_report(f)
    f.write_text("{not json")
    with pytest.raises(BadInput, match="not JSON"):
        load_report(f)
    with pytest.raises(BadInput, match="does not exist"):
        load_report(tmp_path / "none.json")
