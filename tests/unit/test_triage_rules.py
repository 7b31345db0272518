"""The known-issue database: every rule's own samples match, counter-samples do not, and a
broken database is refused at load time with the rule named."""

from __future__ import annotations

import re

import pytest

from engine.errors import BadInput
from engine.triage import Scanner, load_rules
from engine.triage.matcher import ENGINES, RuleIndex
from engine.triage.rules import parse_rules, required_literals

RULES = load_rules()
SAMPLES = [pytest.param(r, s, id=f"{r.id}-{n}") for r in RULES for n, s in enumerate(r.samples)]
COUNTER = [pytest.param(r, s, id=f"{r.id}-not-{n}") for r in RULES for n, s in enumerate(r.counter_samples)]


@pytest.mark.parametrize("rule, line", SAMPLES)
def test_every_sample_is_reported_as_its_rule(rule, line):
    # Through the whole scanner, not just the regex: the pre-filter must let the line in.
    scanner = Scanner()
    scanner.feed(line)
    ids = {i.id for i in scanner.report().issues}
    assert rule.id in ids, f"{rule.id} missed its own sample: {line!r}"


@pytest.mark.parametrize("rule, line", COUNTER)
def test_no_counter_sample_is_reported_as_its_rule(rule, line):
    scanner = Scanner()
    scanner.feed(line)
    assert rule.id not in {i.id for i in scanner.report().issues}


def test_database_covers_the_stack_with_at_least_60_real_signatures():
    assert len(RULES) >= 60
    components = {r.component for r in RULES}
    assert {"vllm", "vllm-ascend", "cann", "torch_npu", "hccl", "driver"} <= components
    for r in RULES:
        assert r.samples and r.counter_samples, r.id
        assert r.links and all(link.startswith("https://") for link in r.links), r.id
        assert r.cause and r.fix, r.id


def test_patterns_stay_in_the_portable_subset():
    # The benchmark hands them to grep -E; RE2 and Hyperscan compile them in the fast paths.
    for r in RULES:
        for p in r.patterns:
            ere = p.replace(r"\d", "[0-9]")
            assert "(?" not in ere, (r.id, p)
    for engine in ENGINES:
        try:
            index = RuleIndex(RULES, engine=engine)
        except RuntimeError:
            continue  # that engine is not installed here
        assert index.engine == engine


def test_bad_regex_is_refused_with_the_rule_named():
    text = """
rules:
  - id: broken-one
    title: t
    severity: error
    patterns: ['NPU (function error']
    cause: c
    fix: f
    samples: ['NPU (function error']
"""
    with pytest.raises(BadInput) as exc:
        parse_rules(text, "my-rules.yaml")
    assert "broken-one" in exc.value.cause and "bad regex" in exc.value.cause


@pytest.mark.parametrize(
    "snippet, message",
    [
        ("    severity: fatal\n", "severity"),
        ("    patterns: ['(?=lookahead) NPU']\n", "lookaround"),
        ("    patterns: ['[0-9]+']\n", "pre-filter"),
    ],
)
def test_invalid_rules_are_refused(snippet, message):
    base = {
        "severity": "    severity: error\n",
        "patterns": "    patterns: ['NPU function error']\n",
    }
    key = snippet.strip().split(":")[0]
    base[key] = snippet
    text = (
        "rules:\n  - id: r-one\n    title: t\n"
        + base["severity"]
        + base["patterns"]
        + "    cause: c\n    fix: f\n    samples: ['NPU function error 12']\n"
    )
    with pytest.raises(BadInput) as exc:
        parse_rules(text, "x.yaml")
    assert message in exc.value.cause


def test_malformed_yaml_names_the_line():
    with pytest.raises(BadInput) as exc:
        parse_rules("rules:\n  - id: [unclosed\n", "x.yaml")
    assert exc.value.cause.startswith("x.yaml:")


def test_a_sample_outside_the_keywords_is_refused():
    text = """
rules:
  - id: kw-rule
    title: t
    severity: error
    patterns: ['aicore timeout']
    keywords: ['something else']
    cause: c
    fix: f
    samples: ['Kernel task happen error, retCode=0x25, [aicore timeout].']
"""
    with pytest.raises(BadInput, match="keywords"):
        parse_rules(text, "x.yaml")


@pytest.mark.parametrize(
    "pattern, expected",
    [
        (r"No available memory for the cache blocks", ["No available memory for the cache blocks"]),
        (r"Worker proc [A-Za-z0-9_-]+ died unexpectedly", [" died unexpectedly"]),
        (r"error code is 50705[345]", ["error code is 50705"]),
        (
            r"EI0006: Getting socket times out|Getting socket times out\. Reason",
            ["EI0006: Getting socket times out", "Getting socket times out. Reason"],
        ),
        (r"models?'s max seq len", ["'s max seq len"]),
        (r"[0-9]+", None),
    ],
)
def test_required_literals(pattern, expected):
    assert required_literals(pattern) == expected


def test_rule_ids_are_unique_and_stable_shape():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9][a-z0-9-]*[a-z0-9]", i) for i in ids)


def test_re2_path_names_the_pieces_of_each_candidate_line():
    # RE2 Set Match returns which pre-filter pieces a line holds, so the block scan can hand each
    # line only its own rules (as Hyperscan does) instead of every keyword.
    index = RuleIndex(RULES, engine="re2")
    try:
        index.engine
    except RuntimeError:
        pytest.skip("re2 is not installed")
    data = b"INFO all good\nValueError: Unknown speculative decoding method: mlp_speculator\n"
    hits = index.hits(data, 0, len(data))
    assert hits and all(off >= data.index(b"ValueError") for off, _ in hits)
    parts = frozenset(i for _, i in hits)
    assert -1 not in parts
    line = data.decode().splitlines()[1]
    assert [r.id for r in index.matching(line, parts)] == [r.id for r in index.matching(line)]
    assert "spec-decode-method-unknown" in {r.id for r in index.matching(line, parts)}


def test_re2_path_keeps_its_fast_automaton_with_every_rule_loaded(capfd):
    # RE2 falls back to its NFA (some 50x slower: aarch64 hosts triage at a few MB/s) when the
    # combined pattern's DFA outgrows its memory budget, and says so only on stderr; at 305 rules
    # the default 8 MiB budget did. The scan must find the line without that fallback.
    index = RuleIndex(RULES, engine="re2")
    try:
        index.engine
    except RuntimeError:
        pytest.skip("re2 is not installed")
    data = (
        b"INFO an ordinary line that names nothing at all\n" * 20000
        + b"ValueError: No available memory for the cache blocks\n"
    )
    hits = index.hits(data, 0, len(data))
    assert hits and all(off >= data.index(b"ValueError") for off, _ in hits)
    assert "DFA out of memory" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "codes, message",
    [
        ("['999999']", "is not a code"),  # outside every code table
        ("['507035']", "already named by"),  # the vector-core-exception rule declares it
    ],
)
def test_a_rule_declares_only_known_codes_each_once(codes, message):
    # the bundled database plus one rule: codes are checked against the tables and the other rules
    text = (
        _builtin_text()
        + "  - id: my-rule\n    title: t\n    severity: error\n    patterns: ['NPU function error']\n"
        + f"    codes: {codes}\n    cause: c\n    fix: f\n    samples: ['NPU function error 12']\n"
    )
    with pytest.raises(BadInput) as exc:
        parse_rules(text, "my-rules.yaml")
    assert "my-rule.codes" in exc.value.cause and message in exc.value.cause


def _builtin_text() -> str:
    from importlib import resources

    return resources.files("engine.triage").joinpath("rules.yaml").read_text(encoding="utf-8")


def test_checked_rules_are_kept_and_reused_until_the_file_changes(tmp_path, monkeypatch):
    """A second run reads the checked rules back instead of checking ~400 rules again (most of
    a small log's triage time); an edit is checked afresh, errors and all; a torn cache is ignored."""
    import engine.triage.rules as rules_mod

    good = "rules:\n  - id: r-one\n    title: t\n    severity: error\n    patterns: ['NPU function error']\n"
    good += "    cause: c\n    fix: f\n    samples: ['NPU function error 12']\n"
    path = tmp_path / "mine.yaml"
    path.write_text(good, encoding="utf-8")
    first = load_rules(path)
    cached = list((tmp_path / "cache" / "triage").glob("rules-*.json"))
    assert len(cached) == 1

    checks = []
    monkeypatch.setattr(rules_mod, "parse_rules", lambda *a: checks.append(a) or parse_rules(*a))
    again = load_rules(path)
    assert again == first and again[0].match("NPU function error 3") and checks == []

    path.write_text(good.replace("NPU function error'", "NPU (function error'"), encoding="utf-8")
    with pytest.raises(BadInput, match="bad regex"):
        load_rules(path)

    path.write_text(good, encoding="utf-8")
    cached[0].write_text('[{"id": "r-one"', encoding="utf-8")  # torn by a full disk
    assert load_rules(path) == first and len(checks) == 2


def test_the_bundled_rules_read_back_from_the_cache_equal_the_checked_ones(tmp_path):
    import engine.triage.rules as rules_mod

    text = (rules_mod.Path(rules_mod.__file__).parent / rules_mod.RULES_FILE).read_text(encoding="utf-8")
    checked = parse_rules(text, rules_mod.RULES_FILE)
    rules_mod._to_cache(rules_mod._cache_file(text), checked)
    assert rules_mod._from_cache(rules_mod._cache_file(text)) == checked


def test_a_full_disk_costs_the_cache_not_the_rules(tmp_path, monkeypatch):
    import errno

    import engine.triage.rules as rules_mod

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rules_mod.json, "dump", full)
    path = tmp_path / "mine.yaml"
    path.write_text(
        "rules:\n  - id: r-one\n    title: t\n    severity: error\n    patterns: ['NPU function error']\n"
        "    cause: c\n    fix: f\n    samples: ['NPU function error 12']\n",
        encoding="utf-8",
    )
    assert [r.id for r in load_rules(path)] == ["r-one"]
    assert list((tmp_path / "cache" / "triage").iterdir()) == []  # no half-written file left
