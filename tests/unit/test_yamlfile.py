"""The one loader of hand-written YAML: lines of every key, one problem for a syntax error, and no
alias bomb getting through to the validators."""

from __future__ import annotations

import json
import time

import pytest

from ascendctl.cli import main
from engine.bench.scenario import load_scenario
from engine.errors import BadInput
from engine.profiles import ProfileInvalid, load_profile
from engine.telemetry import load_thresholds
from engine.triage.rules import load_rules
from engine.yamlfile import QUOTE_LIMIT, Problem, YamlInvalid, duplicate_keys, line_of, load, quote

# Nine aliases a level, nine levels: under 400 bytes that expand to 9**9 (387 million) strings.
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{new}: &{new} [{', '.join(['*' + old] * 9)}]\n" for old, new in zip("abcdefgh", "bcdefghi")
)


def test_problem_reads_file_line_key_message():
    assert (
        str(Problem("broken.yaml", 5, "engine.max_num_seq", "unknown key"))
        == "broken.yaml:5: engine.max_num_seq: unknown key"
    )
    assert str(Problem("broken.yaml", 1, "", "the profile is empty")) == "broken.yaml:1: the profile is empty"
    flag = Problem("--set engine.max_num_seqs=lots", None, "engine.max_num_seqs", "must be an integer")
    assert flag.where == "--set engine.max_num_seqs=lots"
    assert str(flag) == "--set engine.max_num_seqs=lots: engine.max_num_seqs: must be an integer"


def test_lines_of_nested_keys_and_list_items():
    data = load(
        "name: x\n"
        "engine:\n"
        "  max_num_seqs: 4\n"
        "  extra_args:\n"
        "    - --a\n"
        "    - --b\n"
        "phases:\n"
        "  - duration_s: 10\n"
        "    rate: {value: 2,\n"
        "           arrival: poisson}\n",
        "f.yaml",
    )
    assert data == {
        "name": "x",
        "engine": {"max_num_seqs": 4, "extra_args": ["--a", "--b"]},
        "phases": [{"duration_s": 10, "rate": {"value": 2, "arrival": "poisson"}}],
    }
    assert line_of(data, "engine") == 2
    assert line_of(data["engine"], "max_num_seqs") == 3
    assert line_of(data["engine"]["extra_args"], 1) == 6
    assert line_of(data["phases"], 0) == 8
    assert line_of(data["phases"][0]["rate"], "arrival") == 10
    # An unknown key falls back to the line of the mapping that should hold it.
    assert line_of(data["phases"][0], "concurrency") == 8
    assert line_of({"plain": 1}, "plain") is None


def test_duplicates_keep_the_first_value_and_are_reported_with_both_lines():
    data = load("a: 1\nb:\n  c: 2\n  c: 3\n", "f.yaml")
    assert data["b"]["c"] == 2
    assert [str(p) for p in duplicate_keys(data, "f.yaml")] == ["f.yaml:4: b.c: duplicate key (first at line 3)"]


def test_a_merge_key_may_be_overridden_without_a_duplicate():
    data = load("base: &base {x: 1, y: 2}\nmine:\n  <<: *base\n  x: 5\n", "f.yaml")
    assert data["mine"] == {"x": 5, "y": 2}
    assert line_of(data["mine"], "x") == 4
    assert duplicate_keys(data, "f.yaml") == []


@pytest.mark.parametrize(
    "text, line, needle",
    [
        ("a: [1, 2\nb: 3\n", 2, "not valid YAML"),
        ("--- 1\n--- 2\n", 2, "more than one document"),
        ("when: 2024-13-01\n", 1, "bad date"),
        ("a: &a [*a]\n", 1, "contains it"),
    ],
)
def test_unusable_text_is_one_problem_with_its_line(text, line, needle):
    with pytest.raises(YamlInvalid) as info:
        load(text, "f.yaml")
    assert info.value.problem.file == "f.yaml" and info.value.problem.line == line
    assert needle in info.value.problem.message
    assert isinstance(info.value, BadInput) and info.value.fix


def test_a_syntax_error_in_a_profile_is_the_only_problem(tmp_path):
    # Nothing after the error was read, so "platform is required" would be noise.
    path = tmp_path / "p.yaml"
    path.write_text("model:\n  path: /m\nengine: {max_num_seqs: 4\nplatform: cpu\n")
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    assert len(info.value.problems) == 1
    assert str(info.value.problems[0]).startswith(f"{path}:4: not valid YAML: ")


def test_the_four_files_report_a_syntax_error_alike(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_text("a: 1\nb: [2\n")
    expected = f"{path}:3: not valid YAML: "
    causes = []
    for read in (load_profile, load_scenario, load_rules, load_thresholds):
        with pytest.raises(BadInput) as info:
            read(str(path))
        causes.append(info.value.cause)
    assert all(expected in cause for cause in causes), causes


def test_an_alias_bomb_is_refused_quickly():
    start = time.perf_counter()
    with pytest.raises(YamlInvalid) as info:
        load(BOMB, "bomb.yaml")
    assert time.perf_counter() - start < 1.0
    assert "aliases expand to more than" in info.value.problem.message
    assert info.value.problem.line == 6  # the first level past the limit: 9**6 values
    # A few aliases are ordinary YAML.
    assert load("a: &a [1, 2]\nb: *a\nc: *a\n", "f.yaml") == {"a": [1, 2], "b": [1, 2], "c": [1, 2]}


def test_profile_validate_refuses_an_alias_bomb(tmp_path, capsys):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("platform: cpu\nmodel:\n  path: /m\n" + BOMB.replace("\n", "\n  ").join(["env:\n  ", ""]))
    start = time.perf_counter()
    assert main(["profile", "validate", str(bomb), "--json"]) == 2
    assert time.perf_counter() - start < 5.0
    problems = json.loads(capsys.readouterr().out)["results"][0]["problems"]
    assert len(problems) == 1 and "aliases expand" in problems[0]["message"]
    assert problems[0]["file"] == str(bomb) and problems[0]["line"] == 10


def test_values_quoted_in_messages_are_cut(tmp_path):
    assert quote("lots") == "'lots'" and quote(1.5) == "1.5"
    assert len(quote("x" * 10_000)) <= QUOTE_LIMIT
    assert len(quote(load("a: [" + ", ".join(["[1, 2, 3]"] * 500) + "]\n", "f.yaml"))) <= QUOTE_LIMIT
    path = tmp_path / "p.yaml"
    path.write_text("platform: cpu\nmodel:\n  path: /m\nengine:\n  max_num_seqs: " + "9" * 5000 + "x\n")
    with pytest.raises(ProfileInvalid) as info:
        load_profile(str(path))
    message = info.value.problems[0].message
    assert message.startswith("must be an integer >= 1, got '999") and len(message) < 2 * QUOTE_LIMIT
