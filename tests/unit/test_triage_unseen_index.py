"""The unseen splits are well-formed: every listed log exists, has a public source and names an
issue that exists (a rule, a code), `none`, or (second split) `none-fitting`. The accuracy figure
is a benchmark, not a test."""

from __future__ import annotations

import pytest
import yaml
from helpers import FIXTURES, ROOT

from engine.triage import load_rules
from engine.triage.codes import find_codes

UNSEEN = FIXTURES / "logs" / "unseen"
UNSEEN2 = FIXTURES / "logs" / "unseen2"
SPLITS = [UNSEEN, UNSEEN2]
# `none-fitting`: a real cause that no rule names; scored like `none` (naming anything is wrong).
NO_ISSUE = {UNSEEN: {"none"}, UNSEEN2: {"none", "none-fitting"}}


def _index(split) -> dict:
    return yaml.safe_load((split / "INDEX.yaml").read_text(encoding="utf-8"))


def _known_ids() -> set[str]:
    return {r.id for r in load_rules()}


@pytest.mark.parametrize("split", SPLITS, ids=lambda p: p.name)
def test_index_lists_every_log_once_with_a_source(split):
    index = _index(split)
    files = [e["file"] for e in index["logs"]]
    assert len(files) >= 30 and len(files) == len(set(files))
    assert set(files) == {p.name for p in split.glob("*.log")}
    for entry in index["logs"]:
        assert (split / entry["file"]).stat().st_size > 0, entry["file"]
        assert entry["source"].startswith("https://"), entry["file"]
    assert isinstance(index["rules_when_fixed"], int)


@pytest.mark.parametrize("split", SPLITS, ids=lambda p: p.name)
def test_every_expected_issue_exists(split):
    known = _known_ids()
    for entry in _index(split)["logs"]:
        expect = entry["expect"]
        if expect in NO_ISSUE[split] or expect in known:
            continue
        # a code id such as acl-507011 / cann-ei0006: the code table must explain it
        code = expect.split("-", 1)[-1].upper()
        assert any(info.issue_id == expect for info in find_codes(code)), (entry["file"], expect)


def test_second_split_states_each_cause_and_shares_no_source_with_the_first():
    """Each label of the honest split carries the cause the thread gave, and no report is reused
    from the first split (whose logs the rules' author had read)."""
    first = {e["source"] for e in _index(UNSEEN)["logs"]}
    for entry in _index(UNSEEN2)["logs"]:
        assert isinstance(entry.get("cause"), str) and entry["cause"].strip(), entry["file"]
        assert entry["source"] not in first, entry["file"]


def test_no_rule_cites_a_report_of_the_second_split():
    """The split stays held out: no rule's links nor the fixtures' provenance cite its reports."""
    cited = (ROOT / "engine" / "triage" / "rules.yaml").read_text(encoding="utf-8")
    cited += (FIXTURES / "logs" / "PROVENANCE.md").read_text(encoding="utf-8")
    for entry in _index(UNSEEN2)["logs"]:
        source = entry["source"].rstrip("/")
        assert not any(source + end in cited for end in ("'", '"', ")", " ", "\n", "#", "/")), entry["file"]
