"""Scenarios: the built-ins say what the operators run, bad files get one line with file:line."""

from __future__ import annotations

import dataclasses
import random

import pytest

from engine.bench.scenario import fit_context, list_scenarios, load_scenario, scaled, to_yaml, with_duration
from engine.bench.schedule import arrivals, draw_length, expected_requests, window_at, windows
from engine.errors import BadInput


def test_builtins_follow_the_operator_practice():
    assert list_scenarios() == ["burst", "chat-qa", "long-doc"]
    long_doc = load_scenario("long-doc")
    assert [p.concurrency for p in long_doc.phases] == [16]
    assert long_doc.prompt_tokens.min >= 1000  # long documents
    assert long_doc.slo["error_rate"] == 0

    chat = load_scenario("chat-qa")
    assert chat.phases[0].rate == 32 and chat.phases[0].concurrency is None
    assert chat.prompt_tokens.mean == 64 and chat.max_tokens == 128
    assert "output_tokens_per_s" in chat.slo

    burst = load_scenario("burst")
    assert [p.concurrency for p in burst.phases] == [16, 64, 16]
    assert burst.drain_after == "burst" and "queue_drain_s" in burst.slo


def test_every_builtin_round_trips_through_yaml(tmp_path):
    for name in list_scenarios():
        sc = load_scenario(name)
        f = tmp_path / f"{name}.yaml"
        f.write_text(to_yaml(sc), encoding="utf-8")
        again = load_scenario(str(f))
        assert dataclasses.replace(again, source="") == dataclasses.replace(sc, source="")


def _bad(tmp_path, text: str) -> str:
    f = tmp_path / "mine.yaml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(BadInput) as err:
        load_scenario(str(f))
    assert err.value.fix
    return err.value.cause


def test_yaml_syntax_error_names_the_line(tmp_path):
    cause = _bad(tmp_path, "name: x\nphases:\n  - duration_s: 10\n   concurrency: [4\n")
    assert "mine.yaml:4" in cause and "not valid YAML" in cause


def test_every_problem_is_reported_with_its_line(tmp_path):
    cause = _bad(
        tmp_path,
        """\
name: x
phases:
  - duration_s: 10
    concurrency: 4
    rate: 3
  - duration_s: -5
    rate: 2
prompt_tokens: {dist: uniform, min: 50, max: 10}
max_tokens: 0
slo:
  ttft_p99: 100
colour: blue
""",
    )
    assert "mine.yaml:4: concurrency: a phase needs exactly one of" in cause
    assert "mine.yaml:6: duration_s: must be > 0" in cause
    assert "min (50) is above max (10)" in cause
    assert "mine.yaml:9: max_tokens" in cause
    assert "mine.yaml:11: ttft_p99: unknown key" in cause
    assert "mine.yaml:12: colour: unknown key" in cause


def test_drain_slo_needs_a_named_phase(tmp_path):
    cause = _bad(
        tmp_path,
        """\
phases: [{name: a, duration_s: 5, concurrency: 2}]
prompt_tokens: 32
max_tokens: 8
slo: {queue_drain_s: 3}
""",
    )
    assert "queue_drain_s: needs `drain_after" in cause
    cause = _bad(
        tmp_path,
        """\
phases: [{name: a, duration_s: 5, concurrency: 2}]
drain_after: b
prompt_tokens: 32
max_tokens: 8
""",
    )
    assert "drain_after: names no phase (phases: a)" in cause


@pytest.mark.parametrize("text", ["", "- just\n- a list\n", "plain words"])
def test_a_file_that_is_not_a_mapping(tmp_path, text):
    assert "must hold a YAML mapping" in _bad(tmp_path, text)


def test_missing_file_unknown_name_directory_binary(tmp_path):
    with pytest.raises(BadInput, match="does not exist"):
        load_scenario(str(tmp_path / "nope.yaml"))
    with pytest.raises(BadInput, match="unknown scenario 'longdoc'") as err:
        load_scenario("longdoc")
    assert "long-doc" in err.value.fix
    with pytest.raises(BadInput, match="is a directory"):
        load_scenario(str(tmp_path) + "/")
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"\xff\xfe\x00\x01binary")
    with pytest.raises(BadInput, match="cannot read scenario"):
        load_scenario(str(f))


def test_scale_shrinks_load_lengths_time_and_the_throughput_target():
    sc = load_scenario("chat-qa")
    small = scaled(sc, 0.25)
    assert small.phases[0].rate == 8 and small.phases[0].duration_s == 30
    assert small.max_tokens == 32 and small.prompt_tokens.mean == 16
    # The output-token target follows the offered load: a quarter of the rate, a quarter of the tokens.
    assert small.slo["output_tokens_per_s"] == pytest.approx(sc.slo["output_tokens_per_s"] / 16)
    assert small.slo["ttft_p99_ms"] == sc.slo["ttft_p99_ms"]
    burst = scaled(load_scenario("burst"), 0.01)
    assert [p.concurrency for p in burst.phases] == [1, 1, 1]  # never below one request
    with pytest.raises(BadInput):
        scaled(sc, 0)


def test_duration_keeps_phase_proportions():
    sc = with_duration(load_scenario("burst"), 30)
    assert [p.duration_s for p in sc.phases] == [10, 10, 10]
    with pytest.raises(BadInput):
        with_duration(sc, -1)


def test_fit_context_clamps_and_says_so():
    sc = load_scenario("long-doc")
    fitted, notes = fit_context(sc, 512)
    assert fitted.max_tokens == 128  # 512 would leave no room for a prompt
    assert fitted.prompt_tokens.max + fitted.max_tokens <= 512
    assert fitted.prompt_tokens.min < fitted.prompt_tokens.max  # still a spread of lengths
    assert len(notes) == 2 and "max_model_len 512" in notes[1]
    same, none = fit_context(load_scenario("chat-qa"), 32768)
    assert same == load_scenario("chat-qa") and none == []


def test_schedule_windows_and_arrivals():
    sc = load_scenario("burst")
    wins = windows(sc)
    assert [(w.start_s, w.end_s) for w in wins] == [(0, 60), (60, 120), (120, 180)]
    assert window_at(wins, 61).phase.name == "burst" and window_at(wins, 180) is None
    assert expected_requests(sc) is None  # closed loop: depends on the server

    chat = with_duration(load_scenario("chat-qa"), 100)
    (w,) = windows(chat)
    times = list(arrivals(w, random.Random(7)))
    assert 3000 < len(times) < 3400  # Poisson around 32 req/s x 100 s
    assert times == sorted(times) and 0 <= times[0] and times[-1] < 100
    uniform = dataclasses.replace(w, phase=dataclasses.replace(w.phase, arrival="uniform", rate=4))
    assert len(list(arrivals(uniform, random.Random(0)))) == 400
    assert expected_requests(chat) == pytest.approx(3200)


def test_prompt_lengths_stay_in_bounds():
    rng = random.Random(3)
    for name in list_scenarios():
        d = load_scenario(name).prompt_tokens
        draws = [draw_length(d, rng) for _ in range(500)]
        assert min(draws) >= d.min and max(draws) <= d.max


@pytest.mark.parametrize("factor", [1e9, 1001, 100])
def test_a_runaway_scale_is_refused_before_anything_runs(factor):
    # 1e9 grew a run to 24 GB in a minute; 100 turns the burst's 64 into 6400 concurrent.
    with pytest.raises(BadInput) as err:
        scaled(load_scenario("burst"), factor)
    assert "--scale" in err.value.cause


def test_absurd_figures_in_a_file_are_refused_with_their_line(tmp_path):
    f = tmp_path / "huge.yaml"
    f.write_text(
        "phases:\n"
        "  - {name: a, duration_s: 10, concurrency: 1000000}\n"
        "  - {name: b, duration_s: 10, rate: 1.0e+9}\n"
        "prompt_tokens: 1000000000\n"
        "max_tokens: 1000000000\n"
    )
    with pytest.raises(BadInput) as err:
        load_scenario(str(f))
    cause = err.value.cause
    assert "huge.yaml:2: concurrency: must be <= 4096" in cause
    assert "rate: must be <= 5000" in cause and "prompt_tokens: must be between 1 and" in cause
    assert "max_tokens: must be <= 1048576, got 1000000000" in cause
    with pytest.raises(BadInput) as err:
        with_duration(load_scenario("chat-qa"), 1e12)
    assert "--duration" in err.value.cause


def test_a_scaled_scenario_describes_what_it_runs():
    sc = scaled(load_scenario("burst"), 0.5)
    assert sc.description.startswith("Scaled x0.5: before 8 concurrent; burst 32 concurrent; after 8 concurrent")
    assert "(from: 16 concurrent, a jump to 64" in sc.description
    import yaml

    assert yaml.safe_load(to_yaml(sc))["description"] == sc.description  # what --print-scenario shows
