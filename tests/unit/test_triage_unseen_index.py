"""The unseen split is well-formed: every listed log exists, has a public source and names an
issue that exists (a rule, a code) or `none`. The accuracy figure is a benchmark, not a test."""

from __future__ import annotations

import yaml
from helpers import FIXTURES

from engine.triage import load_rules
from engine.triage.codes import find_codes

UNSEEN = FIXTURES / "logs" / "unseen"


def _index() -> dict:
    return yaml.safe_load((UNSEEN / "INDEX.yaml").read_text(encoding="utf-8"))


def _known_ids() -> set[str]:
    return {r.id for r in load_rules()}


def test_index_lists_every_log_once_with_a_source():
    index = _index()
    files = [e["file"] for e in index["logs"]]
    assert len(files) >= 30 and len(files) == len(set(files))
    assert set(files) == {p.name for p in UNSEEN.glob("*.log")}
    for entry in index["logs"]:
        assert (UNSEEN / entry["file"]).stat().st_size > 0, entry["file"]
        assert entry["source"].startswith("https://"), entry["file"]
    assert isinstance(index["rules_when_fixed"], int)


def test_every_expected_issue_exists():
    known = _known_ids()
    for entry in _index()["logs"]:
        expect = entry["expect"]
        if expect == "none" or expect in known:
            continue
        # a code id such as acl-507011 / cann-ei0006: the code table must explain it
        code = expect.split("-", 1)[-1].upper()
        assert any(info.issue_id == expect for info in find_codes(code)), (entry["file"], expect)
