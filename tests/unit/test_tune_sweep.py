"""The sweep's bookkeeping with fake engines: a combination the plan refuses never starts, a
crash is a result and the sweep goes on, --resume repeats nothing done, the best one is written
as a profile that loads."""

from __future__ import annotations

import threading

import pytest

from engine.errors import BadInput
from engine.profiles import load_profile_text
from engine.tune.grid import Combination, combinations, parse_grid
from engine.tune.overlay import overlay_text
from engine.tune.search import Interrupted
from engine.tune.sweep import Engine, Sweeper, SweepSetup, best, check_resume, pareto, read_results


class FakeEngine(Engine):
    def __init__(self, log, combo, crash: bool):
        self.log, self.combo, self.crash = log, combo, crash

    def start(self):
        self.log.append(("start", self.combo.label))
        return not self.crash

    def alive(self):
        return True

    def failure(self):
        return {"exit_code": 1, "diagnosis": "the engine ended (exit code 1): ValueError: too small"}

    def shutdown(self):
        self.log.append(("stop", self.combo.label))


def _sweep(tmp_path, log, done=(), interrupt_at=None, stop=None):
    axes = parse_grid(["engine.max_num_seqs=4,8", "engine.max_num_batched_tokens=4,512"])
    combos = combinations(axes)
    combos[1] = Combination(1, combos[1].settings, skipped="does not fit: the KV cache holds 64 tokens")
    setup = SweepSetup("cpu-tiny", [], None, "chat-qa", {"ttft_p99_ms": 500.0}, "rate", tmp_path / "r.jsonl")
    setup.meta = {"profile": "cpu-tiny", "scenario": "chat-qa"}
    stop = stop or threading.Event()

    def measure(combo, url):
        if interrupt_at == combo.index:
            stop.set()
            raise Interrupted()
        seqs = combo.settings["engine.max_num_seqs"]
        return {"capacity": float(seqs), "band": 0.5, "unit": "req/s", "at_capacity": {"figures": {}}}

    def launch(combo):
        return FakeEngine(
            log, combo, crash=combo.settings["engine.max_num_batched_tokens"] < combo.settings["engine.max_num_seqs"]
        )

    return Sweeper(setup, combos, launch, measure, "http://127.0.0.1:1", lambda _l: None, stop, list(done))


def test_skips_records_the_crash_and_goes_on(tmp_path):
    log = []
    docs, interrupted = _sweep(tmp_path, log).run()
    assert not interrupted
    assert [d["status"] for d in docs] == ["measured", "skipped", "crashed", "measured"]
    assert ("start", "max_num_seqs=4 max_num_batched_tokens=512") not in log  # the skipped one never started
    assert log.count(("stop", "max_num_seqs=8 max_num_batched_tokens=4")) == 1  # the crashed one is swept too
    assert "ValueError" in docs[2]["diagnosis"] and docs[2]["when"] == "start-up"
    assert best(docs)["combination"] == {"engine.max_num_seqs": 8, "engine.max_num_batched_tokens": 512}
    assert len(read_results(tmp_path / "r.jsonl")) == 4


def test_resume_repeats_nothing_done(tmp_path):
    log = []
    docs, interrupted = _sweep(tmp_path, log, interrupt_at=3).run()
    assert interrupted and len(read_results(tmp_path / "r.jsonl")) == 3  # the interrupted one is not kept
    kept = check_resume(tmp_path / "r.jsonl", True, {"profile": "cpu-tiny", "scenario": "chat-qa"})
    log2 = []
    docs2, interrupted2 = _sweep(tmp_path, log2, done=kept).run()
    assert not interrupted2 and [x for x in log2 if x[0] == "start"] == [
        ("start", "max_num_seqs=8 max_num_batched_tokens=512")
    ]
    assert len(read_results(tmp_path / "r.jsonl")) == 4 and len({d["id"] for d in docs2}) == 4


def test_results_of_another_sweep_are_not_mixed_in(tmp_path):
    _sweep(tmp_path, []).run()
    with pytest.raises(BadInput, match="already holds 4 results"):
        check_resume(tmp_path / "r.jsonl", False, {"profile": "cpu-tiny", "scenario": "chat-qa"})
    with pytest.raises(BadInput, match="another scenario"):
        check_resume(tmp_path / "r.jsonl", True, {"profile": "cpu-tiny", "scenario": "burst"})


def test_a_torn_last_line_is_ignored(tmp_path):
    _sweep(tmp_path, []).run()
    with (tmp_path / "r.jsonl").open("a") as f:
        f.write('{"id": "x", "status": "meas')
    assert len(read_results(tmp_path / "r.jsonl")) == 4


def test_the_written_profile_loads_and_carries_the_measured_capacity():
    doc = {
        "combination": {"engine.max_num_seqs": 16, "engine.max_num_batched_tokens": 1024},
        "capacity": {
            "capacity": 6.5,
            "band": 0.25,
            "unit": "req/s",
            "scenario": "chat-qa",
            "targets": {"ttft_p99_ms": 500},
        },
    }
    text = overlay_text("cpu-tiny", ["server.port=18001"], doc, "4 of 4 combinations")
    assert "# Measured capacity: 6.5 ± 0.25 req/s of scenario chat-qa within ttft_p99_ms=500" in text
    prof = load_profile_text(text, "best.yaml")
    assert prof.name == "cpu-tiny-tuned"
    assert (prof.engine.max_num_seqs, prof.engine.max_num_batched_tokens, prof.server.port) == (16, 1024, 18001)
    assert prof.engine.kv_cache_memory_bytes == 3145728  # the rest of the base profile is kept


def test_pareto_front():
    pts = [(100.0, 10.0), (200.0, 5.0), (150.0, 4.0), (50.0, 12.0)]
    assert pareto(pts) == [0, 1, 3]


def test_the_html_report_has_the_capacity_the_front_and_every_combination(tmp_path):
    from engine.tune.html import sweep_html

    docs, _ = _sweep(tmp_path, []).run()
    for d, (tput, per_user) in zip([d for d in docs if d["status"] == "measured"], [(300.0, 40.0), (500.0, 30.0)]):
        d["capacity"]["at_capacity"]["figures"] = {"output_tokens_per_s": tput, "tokens_per_s_per_user": per_user}
    page = sweep_html(
        docs, {"profile": "cpu-tiny", "scenario": "chat-qa", "by": "rate", "targets": {"ttft_p99_ms": 500}}
    )
    assert page.startswith("<!DOCTYPE html>") and "plotly" in page
    assert "Capacity per combination" in page and "Pareto front" in page
    assert page.count("<tr>") == 5  # the header and the four combinations
    assert "crashed at start-up" in page and "skipped: does not fit" in page


def test_an_engine_that_dies_under_load_is_a_crash_and_the_sweep_goes_on(tmp_path):
    from engine.errors import Unreachable

    log = []
    sweeper = _sweep(tmp_path, log)
    inner = sweeper.measure

    class Dying(FakeEngine):
        def alive(self):
            return self.combo.index != 0

    sweeper.launch = lambda combo: Dying(log, combo, crash=False)

    def measure(combo, url):
        if combo.index == 0:
            raise Unreachable("cannot reach http://127.0.0.1:1/v1/models", "")
        return inner(combo, url)

    sweeper.measure = measure
    docs, _ = sweeper.run()
    assert [d["status"] for d in docs] == ["crashed", "skipped", "measured", "measured"]
    assert docs[0]["when"] == "under load"
