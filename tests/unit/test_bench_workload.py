"""Scenarios with a shared prefix and replays of a Mooncake trace: parsed with file:line errors,
prompts that share what they should, a replay that sends what the trace holds."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

from engine.bench.runner import BenchRunner
from engine.bench.scenario import fit_context, load_scenario, parse_scenario, to_yaml
from engine.bench.stub import StubConfig, StubThread
from engine.errors import BadInput

# The first lines of the Mooncake project's toolagent trace (FAST'25 release), lengths shrunk to fit
# a small context: block 0 opens three of the requests, 46-47 two others.
TRACE = [
    {"timestamp": 0, "input_length": 60, "output_length": 5, "hash_ids": [0, 1]},
    {"timestamp": 0, "input_length": 70, "output_length": 4, "hash_ids": [0, 14]},
    {"timestamp": 250, "input_length": 40, "output_length": 3, "hash_ids": [46, 47]},
    {"timestamp": 500, "input_length": 35, "output_length": 3, "hash_ids": [46, 47]},
    {"timestamp": 1000, "input_length": 50, "output_length": 6, "hash_ids": [0, 65]},
]


def _scenario(tmp_path, doc: dict, trace=None):
    if trace is not None:
        (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in trace))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_scenario(str(path))


BASE = {"name": "p", "phases": [{"duration_s": 2, "concurrency": 2}], "prompt_tokens": 40, "max_tokens": 4}


def test_prefix_parses_and_round_trips(tmp_path):
    sc = _scenario(tmp_path, {**BASE, "prefix": {"share": 0.6, "tokens": 32}})
    assert (sc.prefix.share, sc.prefix.tokens, sc.prefix.count) == (0.6, 32, 1)
    again = parse_scenario(yaml.safe_load(to_yaml(sc)), "again")
    assert again.prefix == sc.prefix


@pytest.mark.parametrize(
    "prefix, says",
    [({"share": 1.5, "tokens": 32}, "share"), ({"share": 0.5}, "tokens"), ("lots", "must be a mapping")],
)
def test_a_bad_prefix_is_refused_with_its_line(tmp_path, prefix, says):
    with pytest.raises(BadInput) as exc:
        _scenario(tmp_path, {**BASE, "prefix": prefix})
    assert "s.yaml:" in exc.value.cause and says in exc.value.cause


def test_the_share_of_requests_with_the_prefix_and_only_them_share_it(tmp_path):
    sc = _scenario(tmp_path, {**BASE, "prefix": {"share": 0.6, "tokens": 30, "count": 2}})
    runner = BenchRunner("http://127.0.0.1:1", sc)
    prefixes = {runner._maker.shared(-1, 30), runner._maker.shared(-2, 30)}
    prompts = [runner._prompt(i)[0] for i in range(400)]
    with_prefix = [p for p in prompts if any(p.startswith(x) for x in prefixes)]
    assert 0.53 <= len(with_prefix) / len(prompts) <= 0.67
    assert all(any(p.startswith(x) for p in with_prefix) for x in prefixes)  # both prefixes in use
    assert len(set(prompts)) == len(prompts)  # after the prefix every prompt is its own


def test_a_prefix_too_long_for_the_context_is_shortened_with_a_note(tmp_path):
    sc = _scenario(tmp_path, {**BASE, "prefix": {"share": 0.5, "tokens": 4000}})
    fitted, notes = fit_context(sc, 512)
    assert fitted.prefix.tokens < 512 and any("shared prefix 4000 ->" in n for n in notes)


def test_a_trace_scenario_takes_its_arrivals_and_lengths_from_the_file(tmp_path):
    trace = {"file": "t.jsonl", "block_tokens": 32}
    sc = _scenario(tmp_path, {"name": "replay", "trace": trace, "api": "completions"}, TRACE)
    assert [p.name for p in sc.phases] == ["replay"] and sc.phases[0].arrival == "trace"
    assert sc.trace.arrivals(None) == [0.0, 0.0, 0.25, 0.5, 1.0]
    assert sc.trace.arrivals(10.0) == pytest.approx([0.0, 0.0, 0.125, 0.25, 0.5])  # 5 requests in 0.5 s
    assert sc.trace.duration_at(10.0) == pytest.approx(0.5)
    runner = BenchRunner("http://127.0.0.1:1", sc)
    prompts = [runner._prompt(i) for i in range(5)]
    assert [m for _, m in prompts] == [5, 4, 3, 3, 6]
    block0 = runner._maker.shared(0, 32)
    assert [p.startswith(block0) for p, _ in prompts] == [True, True, False, False, True]
    block46 = runner._maker.shared(46, 32)
    assert [p.startswith(block46) for p, _ in prompts] == [False, False, True, True, False]


@pytest.mark.parametrize(
    "line, says",
    [('{"timestamp": 0, "input_length": "many"}', "t.jsonl:2"), ("not json", "t.jsonl:2")],
)
def test_a_bad_trace_line_is_named(tmp_path, line, says):
    (tmp_path / "t.jsonl").write_text(json.dumps(TRACE[0]) + "\n" + line + "\n")
    (tmp_path / "s.yaml").write_text("name: r\ntrace: t.jsonl\n")
    with pytest.raises(BadInput) as exc:
        load_scenario(str(tmp_path / "s.yaml"))
    assert says in exc.value.cause


def test_a_trace_with_phases_is_refused(tmp_path):
    with pytest.raises(BadInput) as exc:
        _scenario(tmp_path, {**{k: v for k, v in BASE.items() if k != "prompt_tokens"}, "trace": "t.jsonl"}, TRACE)
    assert "leave out `phases`" in exc.value.cause


def test_a_replay_sends_every_request_of_the_trace_with_its_answer_length(tmp_path):
    sc = _scenario(tmp_path, {"name": "replay", "trace": "t.jsonl", "api": "completions"}, TRACE)
    with StubThread(StubConfig(token_delay_s=0.001, max_model_len=1024)) as server:
        report = asyncio.run(BenchRunner(server.url, sc, drain_grace_s=10).run())
    assert report.completed == 5 and report.failed == 0
    assert report.output_tokens == sum(r["output_length"] for r in TRACE)
    assert sorted(report.samples.output_tokens) == sorted(r["output_length"] for r in TRACE)
